package main

import (
	"bytes"
	"strings"
	"testing"
)

// --help and -h print the settings and start nothing (getenv is never asked); any other
// argument is an error that carries the usage.
func TestHelpPrintsSettings(t *testing.T) {
	noEnv := func(k string) string { t.Fatalf("getenv(%q) called: --help must not start anything", k); return "" }
	for _, arg := range []string{"--help", "-h", "-help"} {
		var out bytes.Buffer
		if err := start(t.Context(), []string{arg}, noEnv, &out); err != nil {
			t.Fatalf("%s: %v", arg, err)
		}
		for _, want := range []string{"usage: consumer", "SECKILL_BATCH_SIZE", "[default 1000]", "SECKILL_REDIS_ADDR", "SECKILL_FEEDBACK_GROUP"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%s: output lacks %q:\n%s", arg, want, out.String())
			}
		}
		if strings.Contains(out.String(), "SECKILL_JWT_SECRET") {
			t.Errorf("%s: lists the gateway's SECKILL_JWT_SECRET", arg)
		}
	}
	for _, args := range [][]string{{"--bogus"}, {"serve"}, {"--help", "x"}} {
		err := start(t.Context(), args, noEnv, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), "usage: consumer") {
			t.Errorf("%q: got %v, want an error with the usage", args, err)
		}
	}
}
