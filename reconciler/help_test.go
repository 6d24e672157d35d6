package main

import (
	"bytes"
	"strings"
	"testing"
)

// --help and -h print the flags and the settings and start nothing (getenv is never asked);
// an unknown flag is an error that carries the usage.
func TestHelpPrintsSettings(t *testing.T) {
	noEnv := func(k string) string { t.Fatalf("getenv(%q) called: --help must not start anything", k); return "" }
	for _, arg := range []string{"--help", "-h"} {
		var out bytes.Buffer
		if err := run(t.Context(), []string{arg}, noEnv, &out, &bytes.Buffer{}); err != nil {
			t.Fatalf("%s: %v", arg, err)
		}
		for _, want := range []string{"usage: reconciler", "-once", "SECKILL_RECONCILE_INTERVAL", "[default 10s]", "SECKILL_MYSQL_DSN"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%s: output lacks %q:\n%s", arg, want, out.String())
			}
		}
	}
	var out bytes.Buffer
	err := run(t.Context(), []string{"--bogus"}, noEnv, &out, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error()+out.String(), "usage: reconciler") {
		t.Errorf("--bogus: got %v, want an error with the usage", err)
	}
}
