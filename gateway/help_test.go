package main

import (
	"bytes"
	"strings"
	"testing"
)

// --help, -h and help print the subcommands and the settings and start nothing (getenv is
// never asked); an unknown flag is an error that carries the usage.
func TestHelpPrintsSettings(t *testing.T) {
	noEnv := func(k string) string { t.Fatalf("getenv(%q) called: --help must not start anything", k); return "" }
	for _, arg := range []string{"--help", "-h", "help"} {
		var out bytes.Buffer
		if err := dispatch(t.Context(), []string{arg}, noEnv, &out); err != nil {
			t.Fatalf("%s: %v", arg, err)
		}
		for _, want := range []string{"usage: gateway", "migrate", "SECKILL_JWT_SECRET (or SECKILL_JWT_SECRET_FILE)", "SECKILL_GATEWAY_ADDR", "[default 127.0.0.1:8080]", "SECKILL_KAFKA_BROKERS"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%s: output lacks %q:\n%s", arg, want, out.String())
			}
		}
		if strings.Contains(out.String(), "SECKILL_BATCH_SIZE") {
			t.Errorf("%s: lists the consumer's SECKILL_BATCH_SIZE", arg)
		}
	}
	err := dispatch(t.Context(), []string{"--bogus"}, noEnv, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "usage: gateway") {
		t.Errorf("--bogus: got %v, want an error with the usage", err)
	}
}
