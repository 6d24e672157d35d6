package config

import (
	"slices"
	"strings"
	"testing"
)

// Every SECKILL_* variable a service's Load function reads is in its --help table, and the
// table names nothing the service does not read.
func TestSettingsNameEveryVariableRead(t *testing.T) {
	loads := map[string]func(func(string) string) error{
		"gateway":    func(g func(string) string) error { _, err := LoadGateway(g); return err },
		"consumer":   func(g func(string) string) error { _, err := LoadConsumer(g); return err },
		"reconciler": func(g func(string) string) error { _, err := LoadReconciler(g); return err },
	}
	for service, load := range loads {
		t.Run(service, func(t *testing.T) {
			read := map[string]bool{}
			_ = load(func(k string) string { read[k] = true; return "" }) // errors expected: no secrets
			listed := map[string]bool{}
			for _, s := range SettingsFor(service) {
				listed[s.Name] = true
				if s.File {
					listed[s.Name+"_FILE"] = true
				}
			}
			for k := range read {
				if !listed[k] {
					t.Errorf("%s reads %s, which its --help does not list", service, k)
				}
			}
			for k := range listed {
				if !read[k] {
					t.Errorf("%s --help lists %s, which it does not read", service, k)
				}
			}
		})
	}
}

func TestWriteSettings(t *testing.T) {
	var b strings.Builder
	WriteSettings(&b, "consumer")
	out := b.String()
	for _, want := range []string{"SECKILL_BATCH_SIZE", "[default 1000]", "SECKILL_MYSQL_PASSWORD (or SECKILL_MYSQL_PASSWORD_FILE)"} {
		if !strings.Contains(out, want) {
			t.Errorf("consumer settings lack %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "SECKILL_JWT_SECRET") {
		t.Errorf("consumer settings list a gateway-only variable:\n%s", out)
	}
	names := map[string]bool{}
	for _, s := range Settings() {
		if names[s.Name] {
			t.Errorf("%s listed twice", s.Name)
		}
		names[s.Name] = true
		if s.Meaning == "" || s.Default == "" || strings.Contains(s.Meaning, "\n") {
			t.Errorf("%s: want a default and a one-line meaning", s.Name)
		}
		for _, svc := range s.Services {
			if !slices.Contains([]string{"gateway", "consumer", "reconciler"}, svc) {
				t.Errorf("%s: unknown service %q", s.Name, svc)
			}
		}
	}
}
