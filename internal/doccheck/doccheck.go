// Package doccheck holds the documentation to the code: every make target, SECKILL_*
// variable, seckill_* metric, HTTP route and Kafka topic a Markdown page names must exist in
// the tree, and every relative link must resolve to a file (and its anchor to a heading). It
// also holds the metric definitions those pages, the alert rules and the dashboard read to
// their conventions (MetricProblems). It reads text only; the tests in this package run it on
// README.md, docs/ and the Go sources.
package doccheck

import (
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
	"unicode"
)

// Doc is one Markdown page: its path from the repository root and its text.
type Doc struct {
	Path string
	Text string
}

// Facts is what the code defines, the truth the pages are held to.
type Facts struct {
	MakeTargets map[string]bool // targets of the Makefile
	// VarCorpus is the text SECKILL_* variables must appear in (Go code, deploy/, Makefile,
	// .ci/): a variable nobody reads or writes is a name the docs made up or kept too long.
	VarCorpus string
	// MetricCorpus is the text a seckill_* metric must appear in as a quoted name (the code
	// that registers it); recorded series (seckill:…) must be in Recorded.
	MetricCorpus string
	Recorded     map[string]bool
	Routes       []string        // registered route paths, "{name}" for a path variable
	Topics       map[string]bool // topic names without a prefix, "seckill.grab"
	// ExternalRoutes are /api/v1/ paths of other programs the pages may name (Prometheus's
	// HTTP API), with why.
	ExternalRoutes map[string]string
	// NotMetrics are seckill_* names that are not metrics (a database name), with why.
	NotMetrics map[string]string
	// Files holds the repository's files, for links.
	Files fs.FS
}

// Problem is one statement of a page the code does not back.
type Problem struct {
	Path string
	Line int
	Msg  string
}

func (p Problem) String() string { return fmt.Sprintf("%s:%d: %s", p.Path, p.Line, p.Msg) }

// Check returns every problem of docs against facts, in page and line order.
func Check(docs []Doc, facts Facts) []Problem {
	var out []Problem
	for _, d := range docs {
		out = append(out, checkDoc(d, facts)...)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Path != out[j].Path {
			return out[i].Path < out[j].Path
		}
		return out[i].Line < out[j].Line
	})
	return out
}

var (
	fenceRE  = regexp.MustCompile("(?m)^ *(```|~~~)")
	inlineRE = regexp.MustCompile("``(?:[^`]|`[^`])+?``|`[^`\n]+(?:\n[^`\n]+)?`")
	makeRE   = regexp.MustCompile(`(?:^|[\s;&|(])make\s+(?:[A-Z_]+=\S*\s+)*([a-z][a-z0-9-]*)`)
	varRE    = regexp.MustCompile(`SECKILL_[A-Z0-9_]*(\*)?`)
	metricRE = regexp.MustCompile(`\bseckill_[a-z0-9_]*[a-z0-9]\b`)
	recRE    = regexp.MustCompile(`\bseckill:[a-z0-9_]+:[a-z0-9_:]*[a-z0-9]\b`)
	routeRE  = regexp.MustCompile(`/(?:api|admin)/v1(?:/[A-Za-z0-9_{}.-]*)*`)
	topicRE  = regexp.MustCompile(`(?:^|[^A-Za-z0-9_./-])(seckill\.[a-z][a-z0-9-]*[a-z0-9])(?:$|[^/A-Za-z0-9-])`)
	linkRE   = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	headRE   = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	repoHost = regexp.MustCompile(`^https?://(?:www\.)?(?:github\.com|gitlab\.com|bitbucket\.org)/`)
)

// span is a piece of a page with its offset, so problems can name a line.
type span struct {
	off  int
	text string
}

// split returns a page's code (fenced blocks and inline code spans) and its prose with the
// code blanked out, offsets kept.
func split(text string) (code []span, prose string) {
	b := []byte(text)
	locs := fenceRE.FindAllStringIndex(text, -1)
	for i := 0; i+1 < len(locs); i += 2 {
		start, end := locs[i][0], locs[i+1][1]
		code = append(code, span{start, text[start:end]})
		blank(b, start, end)
	}
	rest := string(b)
	for _, m := range inlineRE.FindAllStringIndex(rest, -1) {
		code = append(code, span{m[0], rest[m[0]:m[1]]})
		blank(b, m[0], m[1])
	}
	return code, string(b)
}

func blank(b []byte, start, end int) {
	for i := start; i < end; i++ {
		if b[i] != '\n' {
			b[i] = ' '
		}
	}
}

func lineOf(text string, off int) int { return strings.Count(text[:off], "\n") + 1 }

func checkDoc(d Doc, f Facts) []Problem {
	var out []Problem
	add := func(off int, format string, args ...any) {
		out = append(out, Problem{d.Path, lineOf(d.Text, off), fmt.Sprintf(format, args...)})
	}
	code, prose := split(d.Text)

	// make targets are named as commands, so only code is read ("make sure" is prose).
	for _, c := range code {
		for _, m := range makeRE.FindAllStringSubmatchIndex(c.text, -1) {
			t := c.text[m[2]:m[3]]
			if !f.MakeTargets[t] {
				add(c.off+m[2], "make target %q is not in the Makefile", t)
			}
		}
	}

	for _, m := range varRE.FindAllStringSubmatchIndex(d.Text, -1) {
		name := d.Text[m[0]:m[1]]
		if m[2] >= 0 { // SECKILL_CLUSTER_*: some variable with that prefix
			prefix := strings.TrimSuffix(name, "*")
			if prefix != "SECKILL_" && !strings.Contains(f.VarCorpus, prefix) {
				add(m[0], "no variable starts with %s in the code or scripts", prefix)
			}
			continue
		}
		if name == "SECKILL_" || strings.HasSuffix(name, "_") {
			continue // a prefix in prose (SECKILL_<NAME>)
		}
		if !hasWord(f.VarCorpus, name) {
			add(m[0], "environment variable %s is not read or set anywhere in the code or scripts", name)
		}
	}

	for _, m := range metricRE.FindAllStringIndex(d.Text, -1) {
		name := d.Text[m[0]:m[1]]
		if _, ok := f.NotMetrics[name]; ok {
			continue
		}
		if !metricDefined(f.MetricCorpus, name) {
			add(m[0], "metric %s is not registered in the code", name)
		}
	}
	for _, m := range recRE.FindAllStringIndex(d.Text, -1) {
		if name := d.Text[m[0]:m[1]]; !f.Recorded[name] {
			add(m[0], "recorded series %s is not in the monitoring rules", name)
		}
	}

	for _, m := range routeRE.FindAllStringIndex(d.Text, -1) {
		r := strings.TrimRight(d.Text[m[0]:m[1]], ".")
		if _, ok := f.ExternalRoutes[r]; ok {
			continue
		}
		if !routeKnown(f.Routes, r) {
			add(m[0], "route %s is not registered by any service", r)
		}
	}

	for _, m := range topicRE.FindAllStringSubmatchIndex(d.Text, -1) {
		if t := d.Text[m[2]:m[3]]; !f.Topics[t] {
			add(m[2], "topic %s is not defined in pkg/event", t)
		}
	}

	for _, m := range linkRE.FindAllStringSubmatchIndex(prose, -1) {
		if msg := checkLink(d, prose[m[2]:m[3]], f.Files); msg != "" {
			add(m[2], "link %s: %s", prose[m[2]:m[3]], msg)
		}
	}
	return out
}

// hasWord reports whether name appears in text not followed by more of a variable name
// (SECKILL_REDIS_PASSWORD inside SECKILL_REDIS_PASSWORD_FILE does not count).
func hasWord(text, name string) bool {
	for i := 0; ; {
		j := strings.Index(text[i:], name)
		if j < 0 {
			return false
		}
		end := i + j + len(name)
		start := i + j
		before := start == 0 || !isVarChar(text[start-1])
		after := end == len(text) || !isVarChar(text[end])
		if before && after {
			return true
		}
		i = end
	}
}

func isVarChar(c byte) bool { return c == '_' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }

// metricDefined reports whether the code names the metric as a quoted string; a histogram's
// series (_bucket, _sum, _count) count as the histogram.
func metricDefined(corpus, name string) bool {
	if strings.Contains(corpus, `"`+name+`"`) {
		return true
	}
	for _, s := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, s); ok && strings.Contains(corpus, `"`+base+`"`) {
			return true
		}
	}
	return false
}

// routeKnown reports whether a route the docs name matches a registered one: segment by
// segment, a registered {variable} matches any segment; a path ending in "/" is a prefix.
func routeKnown(routes []string, doc string) bool {
	ds := strings.Split(strings.Trim(doc, "/"), "/")
	prefix := strings.HasSuffix(doc, "/")
	for _, r := range routes {
		rs := strings.Split(strings.Trim(r, "/"), "/")
		if len(rs) < len(ds) || !prefix && len(rs) != len(ds) {
			continue
		}
		ok := true
		for i, s := range ds {
			isVar := strings.HasPrefix(rs[i], "{")
			if s == rs[i] || isVar || strings.HasPrefix(s, "{") && isVar {
				continue
			}
			ok = false
			break
		}
		if ok {
			return true
		}
	}
	return false
}

// checkLink returns why a link does not resolve, or "".
func checkLink(d Doc, target string, files fs.FS) string {
	switch {
	case repoHost.MatchString(target):
		return "points at another project's repository; link inside this one"
	case strings.HasPrefix(target, "http://"), strings.HasPrefix(target, "https://"), strings.HasPrefix(target, "mailto:"):
		return ""
	}
	file, anchor, _ := strings.Cut(target, "#")
	text := d.Text
	if file != "" {
		p := path.Join(path.Dir(d.Path), file)
		if p == ".." || strings.HasPrefix(p, "../") || strings.HasPrefix(file, "/") {
			return "leaves the repository"
		}
		// A page under docs/ names files outside its folder as paths, not links: a reader
		// of the one file (a copy, a rendered page) gets a path instead of a dead link.
		if strings.HasPrefix(file, "../") {
			return "climbs out of " + path.Dir(d.Path) + "/; name the file as a path instead"
		}
		info, err := fs.Stat(files, p)
		if err != nil {
			return "no such file " + p
		}
		if anchor == "" {
			return ""
		}
		if info.IsDir() || !strings.HasSuffix(p, ".md") {
			return "an anchor into " + p + ", which is not a Markdown file"
		}
		b, err := fs.ReadFile(files, p)
		if err != nil {
			return fmt.Sprintf("read %s: %v", p, err)
		}
		text = string(b)
	}
	if anchor != "" && !slices.Contains(Anchors(text), anchor) {
		return "no heading with the anchor #" + anchor
	}
	return ""
}

// Anchors returns the GitHub anchors of a page's headings, in order: the heading's text
// lower-cased, without punctuation, spaces as hyphens, "-1", "-2" … for repeats.
func Anchors(text string) []string {
	_, prose := split(text)
	lines := strings.Split(text, "\n")
	proseLines := strings.Split(prose, "\n")
	seen := map[string]int{}
	var out []string
	for i, l := range lines {
		// Headings inside fenced blocks are blanked in prose; inline code in a heading is
		// part of its text, so the text is read from the original line.
		if !strings.HasPrefix(strings.TrimLeft(proseLines[i], " "), "#") {
			continue
		}
		m := headRE.FindStringSubmatch(strings.TrimLeft(l, " "))
		if m == nil {
			continue
		}
		s := Slug(m[2])
		if n := seen[s]; n > 0 {
			out = append(out, fmt.Sprintf("%s-%d", s, n))
		} else {
			out = append(out, s)
		}
		seen[s]++
	}
	return out
}

var mdLinkRE = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)

// Slug is GitHub's anchor for a heading's text.
func Slug(heading string) string {
	h := mdLinkRE.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-', r == '_', unicode.IsLetter(r), unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
