package jsonapi

import (
	"encoding/json"
	"testing"
)

func TestWholeNumber(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		ok   bool
	}{
		{"2168", 2168, true},
		{"2168.0", 2168, true},
		{"2.168e3", 2168, true},
		{"-0.0", 0, true},
		{"9007199254740993", 9007199254740993, true}, // plain integers exactly, past float64's 2^53
		{"2168.5", 0, false},
		{"1e999999999", 0, false}, // +Inf, at once: no billion-digit number is built
		{"1e20", 0, false},        // integral, but past 2^53
		{`"5"`, 0, false},
		{"true", 0, false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			var v struct {
				N *WholeNumber `json:"n"`
			}
			err := json.Unmarshal([]byte(`{"n": `+tc.in+`}`), &v)
			if (err == nil) != tc.ok || (tc.ok && int(*v.N) != tc.want) {
				t.Fatalf("%s: %v, %v; want %d, ok %v", tc.in, v.N, err, tc.want, tc.ok)
			}
		})
	}
}
