package main

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// A descriptor inherited without close-on-exec (flock(1)'s lock) does not reach the processes
// the run starts once closeInheritedOnExec ran.
func TestInheritedDescriptorsStayWithTheRun(t *testing.T) {
	fd, err := syscall.Open(filepath.Join(t.TempDir(), "lock"), syscall.O_CREAT|syscall.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	inherits := func() bool {
		out, err := exec.Command("ls", "/proc/self/fd").Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Contains(" "+strings.Join(strings.Fields(string(out)), " ")+" ", " "+strconv.Itoa(fd)+" ")
	}
	if !inherits() {
		t.Fatal("a child did not inherit the descriptor before the call: the test shows nothing")
	}
	closeInheritedOnExec()
	if inherits() {
		t.Fatalf("a child still inherits descriptor %d", fd)
	}
}
