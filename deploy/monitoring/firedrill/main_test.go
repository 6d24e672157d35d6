package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v4"
)

func TestPick(t *testing.T) {
	names := func(ss []scenario) []string {
		var out []string
		for _, s := range ss {
			out = append(out, s.name)
		}
		return out
	}
	for _, tc := range []struct {
		name, profile, scenario string
		want                    []string
		err                     string // a part of the error; "" for none
	}{
		{name: "single all", profile: single, scenario: "all",
			want: []string{"soldout", "relay", "lease-stuck", "mysql-readonly", "mysql-down", "kafka-down", "conflicts"}},
		{name: "cluster all", profile: cluster, scenario: "all",
			want: []string{"broker-down", "below-min-isr", "replica-stopped", "replica-lag", "semisync-off"}},
		{name: "one of the profile", profile: cluster, scenario: "replica-lag", want: []string{"replica-lag"}},
		{name: "a single scenario on cluster", profile: cluster, scenario: "kafka-down", err: "runs on the single profile"},
		{name: "a cluster scenario on single", profile: single, scenario: "broker-down", err: "runs on the cluster profile"},
		{name: "unknown scenario", profile: cluster, scenario: "nope", err: "want one of broker-down, below-min-isr"},
		{name: "unknown profile", profile: "secure", scenario: "all", err: "unknown profile"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := pick(scenarios, tc.profile, tc.scenario)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("pick(%s, %s) = %v, %v; want an error with %q", tc.profile, tc.scenario, names(got), err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(names(got), tc.want) {
				t.Fatalf("pick(%s, %s) = %v, %v; want %v", tc.profile, tc.scenario, names(got), err, tc.want)
			}
		})
	}
}

// notDrilled are the alerts no scenario raises: those that came before issue 26 asked for
// fire drills. A new alert gets a scenario (in either profile) or a place here, knowingly.
var notDrilled = []string{
	"SeckillDriftNotCorrected", "SeckillCompensationBacklog", "SeckillDeadLetters", "SeckillExceptionsOpen",
	"SeckillConsumerLagGrowing", "SeckillGatewayRelayPending", "SeckillOrderEventsStuck",
	"SeckillPaymentTimeoutsDeferred", "SeckillReconcilerDown", "SeckillReconcilerNoLeaseHolder",
	"SeckillReconcilerRunsFailing", "SeckillGatewayErrors", "SeckillRedisMemoryHigh",
	"SeckillRedisMemoryCritical", "SeckillTargetDown",
	// No scenario builds a bucketed prize yet: a drill needs the gateway's home-bucket
	// routing (issue 27, phase 2) to make a bucket wanted.
	"SeckillBucketStarved",
	// Issue 39's two (wrong admin tokens in a burst; the tokens file's reload refused): each
	// has its promtool unit test (alerts_test.yml); their drills against make run and make
	// monitor are still to be written and run.
	"SeckillAdminAuthFailures", "SeckillGatewayAdminTokensReloadFailing",
}

func alertNames(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r.Alert)
			}
		}
	}
	if len(out) < 20 {
		t.Fatalf("%d alerts read from alerts.yml; its shape changed", len(out))
	}
	return out
}

// Every alert in alerts.yml fires in a scenario of one profile or the other, unless it is
// listed in notDrilled; every alert a scenario waits for exists.
func TestEveryAlertHasAFireDrill(t *testing.T) {
	alerts := alertNames(t)
	drilled := map[string][]string{} // alert -> scenarios
	for _, s := range scenarios {
		if len(s.alerts) == 0 || s.start == nil || s.watch == "" {
			t.Errorf("scenario %s: alerts, start and watch must be set", s.name)
		}
		for _, a := range s.alerts {
			drilled[a] = append(drilled[a], profileOf(s)+" "+s.name)
			if !slices.Contains(alerts, a) {
				t.Errorf("scenario %s waits for %s, which alerts.yml does not define", s.name, a)
			}
		}
	}
	for _, a := range alerts {
		switch {
		case drilled[a] == nil && !slices.Contains(notDrilled, a):
			t.Errorf("%s: no fire drill scenario raises it (add one to deploy/monitoring/firedrill, or list it in notDrilled)", a)
		case drilled[a] != nil && slices.Contains(notDrilled, a):
			t.Errorf("%s is listed in notDrilled but %v raise it", a, drilled[a])
		}
	}
	for _, a := range notDrilled {
		if !slices.Contains(alerts, a) {
			t.Errorf("notDrilled names %s, which alerts.yml does not define", a)
		}
	}
}

// Each drilled alert's runbook paragraph names the scenario that raises it, so an operator
// reading it learns how to rehearse it.
func TestRunbookNamesEachDrill(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "runbook.md"))
	if err != nil {
		t.Fatal(err)
	}
	paragraphs := map[string]string{}
	parts := regexp.MustCompile(`(?m)^## `).Split(string(b), -1)
	for _, p := range parts[1:] {
		title, body, _ := strings.Cut(p, "\n")
		paragraphs[strings.TrimSpace(title)] = body
	}
	for _, s := range scenarios {
		for _, a := range s.alerts {
			body, ok := paragraphs[a]
			if !ok {
				t.Errorf("docs/runbook.md has no \"## %s\" paragraph", a)
				continue
			}
			if !strings.Contains(body, s.name) {
				t.Errorf("docs/runbook.md, %s: does not name its fire drill scenario %s", a, s.name)
			}
		}
	}
}
