// Package buildinfo says which build a binary is, for --version and the seckill_build_info
// metric: the version stamped at link time (make build and the Docker image pass
// -ldflags "-X github.com/seckill-pipeline/seckill/pkg/buildinfo.version=..."), the VCS
// revision Go stamps itself when it builds inside a git checkout, and the Go version.
package buildinfo

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Set at link time with -X; empty in a plain `go build`.
var (
	version  string
	revision string
)

// Info identifies a build.
type Info struct {
	Version   string // link-time version, else the module version, else "dev"
	Revision  string // VCS revision (12 hex digits, "-dirty" if modified), else "unknown"
	GoVersion string
}

// Read returns this binary's build info.
func Read() Info {
	bi, _ := debug.ReadBuildInfo()
	return fromBuild(bi, version, revision, runtime.Version())
}

func fromBuild(bi *debug.BuildInfo, version, revision, goVersion string) Info {
	info := Info{Version: version, Revision: revision, GoVersion: goVersion}
	var vcsRev string
	dirty := false
	if bi != nil {
		if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			info.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				vcsRev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	// Go's own stamp is taken over the link-time one: it cannot be stale.
	if vcsRev != "" {
		if len(vcsRev) > 12 {
			vcsRev = vcsRev[:12]
		}
		if dirty {
			vcsRev += "-dirty"
		}
		info.Revision = vcsRev
	}
	if info.Version == "" {
		info.Version = "dev"
	}
	if info.Revision == "" {
		info.Revision = "unknown"
	}
	return info
}

// String is the one line --version prints after the program's name.
func (i Info) String() string {
	return fmt.Sprintf("%s (revision %s, %s)", i.Version, i.Revision, i.GoVersion)
}

// PrintVersion prints "NAME VERSION (revision …, go…)" to w and reports true when args (the
// program's arguments without its name) ask for the version: --version, -version or version.
// main calls it first and returns when it reports true.
func PrintVersion(args []string, name string, w io.Writer) bool {
	if len(args) != 1 || (args[0] != "--version" && args[0] != "-version" && args[0] != "version") {
		return false
	}
	fmt.Fprintln(w, name, Read())
	return true
}

// Register registers the seckill_build_info gauge of service on reg: always 1, the build in
// its labels, so a dashboard can show which build each instance runs and when that changed.
func Register(reg prometheus.Registerer, service string) {
	i := Read()
	g := promauto.With(reg).NewGauge(prometheus.GaugeOpts{
		Name: "seckill_build_info",
		Help: "Always 1; the labels name the running build (version, VCS revision, Go version).",
		ConstLabels: prometheus.Labels{
			"service": service, "version": i.Version, "revision": i.Revision, "go_version": i.GoVersion,
		},
	})
	g.Set(1)
}
