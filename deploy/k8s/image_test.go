package k8s

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestImageIsDistrolessNonRoot: the image the manifests run (deploy/docker/Dockerfile) has
// no shell or package manager to abuse (distroless static, or scratch) and runs as a
// numeric non-root user, which the kubelet can verify against runAsNonRoot.
func TestImageIsDistrolessNonRoot(t *testing.T) {
	src, err := os.ReadFile("../docker/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	// The runtime stage: everything after the last FROM (continuation lines joined).
	text := strings.ReplaceAll(string(src), "\\\n", " ")
	var final []string
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(strings.ToUpper(line), "FROM ") {
			final = nil
		}
		final = append(final, line)
	}
	if len(final) == 0 {
		t.Fatal("no FROM in the Dockerfile")
	}
	base := strings.Fields(final[0])[1]
	if !regexp.MustCompile(`^(gcr\.io/distroless/static(-debian\d+)?(:[\w.-]+)?(@sha256:[0-9a-f]{64})?|scratch)$`).MatchString(base) {
		t.Errorf("runtime stage FROM %s: want gcr.io/distroless/static or scratch", base)
	}
	user := ""
	for _, line := range final[1:] {
		fields := strings.Fields(line)
		switch strings.ToUpper(fields[0]) {
		case "RUN":
			t.Errorf("runtime stage runs %q: a distroless stage has nothing to run", line)
		case "USER":
			user = fields[1]
		}
	}
	uid, err := strconv.Atoi(strings.SplitN(user, ":", 2)[0])
	if err != nil || uid == 0 {
		t.Errorf("runtime stage USER %q: want a numeric non-root user (65532)", user)
	}
}
