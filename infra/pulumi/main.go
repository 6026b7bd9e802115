// Command pulumi is the relayfleet Pulumi project's program, for `pulumi
// up` in infra/pulumi on the stacks fleet up manages: program.ProjectProgram,
// which reads the stack's configuration and runs program.Deploy, the
// function fleet up runs inline.
package main

import (
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/relayfleet/relayfleet/infra/program"
)

func main() {
	pulumi.Run(program.ProjectProgram)
}
