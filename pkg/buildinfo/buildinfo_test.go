package buildinfo

import (
	"bytes"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestFromBuild(t *testing.T) {
	vcs := func(rev, modified string) *debug.BuildInfo {
		return &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}}
	}
	tests := []struct {
		name              string
		bi                *debug.BuildInfo
		version, revision string
		want              Info
	}{
		{"nothing known", nil, "", "", Info{"dev", "unknown", "go1"}},
		{"link-time stamps (Docker: no .git)", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "v1.2.0", "0123456789ab",
			Info{"v1.2.0", "0123456789ab", "go1"}},
		{"go build in a clean checkout", vcs("0123456789abcdef0123", "false"), "", "", Info{"dev", "0123456789ab", "go1"}},
		{"go build in a modified checkout", vcs("0123456789abcdef0123", "true"), "", "", Info{"dev", "0123456789ab-dirty", "go1"}},
		{"Go's revision wins over a link-time one", vcs("fedcba9876543210", "false"), "v1", "0123", Info{"v1", "fedcba987654", "go1"}},
		{"go install of a module version", &debug.BuildInfo{Main: debug.Module{Version: "v0.3.1"}}, "", "", Info{"v0.3.1", "unknown", "go1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := fromBuild(tc.bi, tc.version, tc.revision, "go1"); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestPrintVersion(t *testing.T) {
	tests := []struct {
		args []string
		want bool
	}{
		{[]string{"--version"}, true},
		{[]string{"-version"}, true},
		{[]string{"version"}, true},
		{nil, false},
		{[]string{"--once"}, false},
		{[]string{"--version", "x"}, false},
	}
	for _, tc := range tests {
		var out bytes.Buffer
		if got := PrintVersion(tc.args, "gateway", &out); got != tc.want {
			t.Errorf("PrintVersion(%q) = %v, want %v", tc.args, got, tc.want)
		}
		if tc.want && !strings.HasPrefix(out.String(), "gateway "+Read().Version+" (revision ") {
			t.Errorf("PrintVersion(%q) printed %q", tc.args, out.String())
		}
		if !tc.want && out.Len() > 0 {
			t.Errorf("PrintVersion(%q) printed %q", tc.args, out.String())
		}
	}
}

func TestRegister(t *testing.T) {
	reg := prometheus.NewRegistry()
	Register(reg, "consumer")
	i := Read()
	want := `# HELP seckill_build_info Always 1; the labels name the running build (version, VCS revision, Go version).
# TYPE seckill_build_info gauge
seckill_build_info{go_version="` + i.GoVersion + `",revision="` + i.Revision + `",service="consumer",version="` + i.Version + `"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "seckill_build_info"); err != nil {
		t.Fatal(err)
	}
}
