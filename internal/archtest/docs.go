package archtest

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
)

// MaxReadmeLines is how long README.md may grow: it is the front page, and
// the rest lives in docs/.
const MaxReadmeLines = 320

// DocFiles are the markdown files whose links CheckDocs holds, relative to
// the module root: README.md and docs/*.md.
func DocFiles(root string) ([]string, error) {
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	files := []string{"README.md"}
	for _, d := range docs {
		rel, err := filepath.Rel(root, d)
		if err != nil {
			return nil, err
		}
		files = append(files, filepath.ToSlash(rel))
	}
	return files, nil
}

var (
	// mdLink matches [text](target) and ![alt](target), with an optional
	// "title"; the target has no spaces.
	mdLink     = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	inlineCode = regexp.MustCompile("`[^`]*`")
	scheme     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// CheckDocs reads the markdown files (paths relative to root) and returns
// one line per problem: a relative link to a file that does not exist, a
// link to a heading (#anchor) a markdown file lacks, and a README.md longer
// than MaxReadmeLines. Links in fenced code blocks and inline code are not
// links; absolute URLs (https:, mailto:) are not checked.
func CheckDocs(root string, files []string) []string {
	var bad []string
	anchors := map[string]map[string]bool{} // by clean path relative to root
	anchorsOf := func(rel string) (map[string]bool, error) {
		if a, ok := anchors[rel]; ok {
			return a, nil
		}
		text, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			return nil, err
		}
		a := headingAnchors(string(text))
		anchors[rel] = a
		return a, nil
	}
	for _, file := range files {
		text, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s: %v", file, err))
			continue
		}
		lines := strings.Split(strings.TrimSuffix(string(text), "\n"), "\n")
		if file == "README.md" && len(lines) > MaxReadmeLines {
			bad = append(bad, fmt.Sprintf("README.md: %d lines, more than %d: it is the front page; move the detail into docs/", len(lines), MaxReadmeLines))
		}
		fenced := false
		for i, line := range lines {
			if t := strings.TrimSpace(line); strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
				fenced = !fenced
				continue
			}
			if fenced {
				continue
			}
			for _, m := range mdLink.FindAllStringSubmatch(inlineCode.ReplaceAllString(line, ""), -1) {
				target := m[1]
				if scheme.MatchString(target) {
					continue
				}
				path, anchor, _ := strings.Cut(target, "#")
				where := fmt.Sprintf("%s:%d: link %s", file, i+1, target)
				rel := file
				if path != "" {
					rel = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(file), path)))
					if strings.HasPrefix(rel, "../") || rel == ".." {
						bad = append(bad, where+": points outside the module")
						continue
					}
					if _, err := os.Stat(filepath.Join(root, rel)); err != nil {
						bad = append(bad, where+": no such file "+rel)
						continue
					}
				}
				if anchor == "" || !strings.HasSuffix(rel, ".md") {
					continue
				}
				a, err := anchorsOf(rel)
				if err != nil {
					bad = append(bad, fmt.Sprintf("%s: %v", where, err))
					continue
				}
				if !a[anchor] {
					bad = append(bad, fmt.Sprintf("%s: %s has no heading #%s", where, rel, anchor))
				}
			}
		}
	}
	return bad
}

// headingAnchors are the anchors GitHub gives a markdown file's headings:
// lower case, inline markup and punctuation dropped, spaces as hyphens, and
// -1, -2 ... after a repeated one.
func headingAnchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		level := len(line) - len(strings.TrimLeft(line, "#"))
		if level > 6 || !strings.HasPrefix(line[level:], " ") {
			continue
		}
		title := strings.TrimSpace(line[level:])
		slug := slugify(title)
		if n, ok := seen[slug]; ok {
			seen[slug] = n + 1
			out[fmt.Sprintf("%s-%d", slug, n+1)] = true
			continue
		}
		seen[slug] = 0
		out[slug] = true
	}
	return out
}

// slugify is GitHub's heading anchor: lower case; letters, digits, hyphens
// and underscores kept; spaces become hyphens; everything else dropped.
func slugify(title string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
