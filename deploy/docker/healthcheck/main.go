// Command healthcheck is the container image's health probe for docker-compose.yml: the
// image is distroless (no shell, no curl), so compose's healthchecks run this instead. It
// GETs each URL and exits 0 only if every one answers 2xx within the timeout. Kubernetes
// needs none of it: the kubelet probes over HTTP itself (deploy/k8s).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func main() {
	if err := run(os.Args[1:], http.DefaultClient); err != nil {
		fmt.Fprintln(os.Stderr, "healthcheck:", err)
		os.Exit(1)
	}
}

func run(args []string, client *http.Client) error {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 3*time.Second, "how long all the URLs together may take")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("usage: healthcheck [-timeout 3s] URL [URL...]")
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	for _, url := range fs.Args() {
		if err := check(ctx, client, url); err != nil {
			return err
		}
	}
	return nil
}

func check(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("request %s: %w", url, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("get %s: %w", url, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("get %s: %s", url, resp.Status)
	}
	return nil
}
