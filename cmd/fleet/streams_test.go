package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestCommandsUseTheirStreams: outside main.go, the commands write to
// and read from the IOStreams they are given (internal/cli), never the
// process's os.Stdin, os.Stdout or os.Stderr, so a caller (a test, the
// demo) gets every line, warnings included.
func TestCommandsUseTheirStreams(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if name == "main.go" || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "os" && (sel.Sel.Name == "Stdin" || sel.Sel.Name == "Stdout" || sel.Sel.Name == "Stderr") {
				t.Errorf("%s: os.%s: use the command's IOStreams", fset.Position(sel.Pos()), sel.Sel.Name)
			}
			return true
		})
	}
}
