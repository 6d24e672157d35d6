package main

import (
	"context"
	"fmt"
	"io"

	"github.com/seckill-pipeline/seckill/pkg/config"
)

const usage = `usage: consumer [--help | --version]
  (no arguments)         consume grab events and write orders, configured by the variables below`

// start reads the command line before anything starts: --help prints the settings and reads
// no variable; any other argument is refused rather than ignored, so a mistyped flag cannot
// start a consumer the operator meant to ask about.
func start(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	switch {
	case len(args) == 0:
		return run(ctx, getenv, stdout)
	case len(args) == 1 && (args[0] == "--help" || args[0] == "-help" || args[0] == "-h" || args[0] == "help"):
		fmt.Fprintf(stdout, "%s\n\n", usage)
		config.WriteSettings(stdout, "consumer")
		return nil
	}
	return fmt.Errorf("unknown arguments %q\n%s", args, usage)
}
