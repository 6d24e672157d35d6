package main

import (
	"strings"
	"testing"
)

// gateway token mints no token the gateways would refuse for its lifetime.
const jwtSecret = "jwt-secret-for-tests-0123456789abcdef"

func TestTokenLifetimeCapped(t *testing.T) {
	env := map[string]string{"SECKILL_ADMIN_TOKEN": "0123456789abcdef", "SECKILL_JWT_SECRET": jwtSecret}
	getenv := func(k string) string { return env[k] }
	for _, tc := range []struct {
		name, ttl, max, wantErr string
	}{
		{"the default hour", "", "", ""},
		{"the default cap", "2h", "", ""},
		{"beyond the default cap", "3h", "", "longer than SECKILL_JWT_MAX_LIFETIME (2h0m0s)"},
		{"a year", "8760h", "", "longer than SECKILL_JWT_MAX_LIFETIME"},
		{"beyond a lowered cap", "1h", "30m", "longer than SECKILL_JWT_MAX_LIFETIME (30m0s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env["SECKILL_JWT_MAX_LIFETIME"] = tc.max
			args := []string{"alice"}
			if tc.ttl != "" {
				args = append(args, tc.ttl)
			}
			var out strings.Builder
			err := token(getenv, args, &out)
			switch {
			case tc.wantErr == "" && (err != nil || strings.Count(out.String(), ".") != 2):
				t.Fatalf("err %v, out %q", err, out.String())
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("err %v, want %q", err, tc.wantErr)
			}
		})
	}
}
