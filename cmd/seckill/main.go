// Command seckill is the buyer's side of the pipeline. Its one subcommand, verify-draw,
// checks a buyer's place in a fair sale's draw (package draw) from the gateway's public API
// and the buyer's own token, nothing else: the seed against its commitment, the beacon's
// signature, the buyer's entry in the frozen set, and their ranking value and place.
//
//	SECKILL_USER_TOKEN=<your token> seckill verify-draw -gateway https://shop.example -session 7 -prize 12
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/draw"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "seckill:", err)
		os.Exit(1)
	}
}

const usage = `usage: seckill verify-draw -session N -prize N [flags]

Checks your place in a draw from the gateway's public record and your own proof.
Your token is read from SECKILL_USER_TOKEN (never from the command line: it would sit in
the shell's history and the process list).`

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "verify-draw" {
		fmt.Fprintln(stderr, usage)
		return errors.New("unknown or missing subcommand")
	}
	fs := flag.NewFlagSet("verify-draw", flag.ContinueOnError)
	fs.SetOutput(stderr)
	gateway := fs.String("gateway", envOr(getenv, "SECKILL_GATEWAY_URL", "http://127.0.0.1:8080"), "the gateway's public URL (SECKILL_GATEWAY_URL)")
	session := fs.Int64("session", 0, "the session's id")
	prize := fs.Int64("prize", 0, "the prize's id")
	commitment := fs.String("commitment", "", "the commitment you saw before the window closed (hex): the record must still name it")
	root := fs.String("root", "", "the Merkle root you saw at the freeze (hex): the record must still name it")
	beaconRound := fs.Uint64("beacon-round", 0, "the beacon round the record named before the window closed: the record must still name it (0: not pinned)")
	beaconKey := fs.String("beacon-key", "", "the beacon network's public key as you know it (hex); empty: the record's, which only proves the record is consistent")
	asJSON := fs.Bool("json", false, "print the verdict as JSON")
	timeout := fs.Duration("timeout", time.Minute, "how long the two requests may take")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	token := strings.TrimSpace(getenv("SECKILL_USER_TOKEN"))
	switch {
	case *session <= 0 || *prize <= 0:
		return errors.New("-session and -prize are required (positive ids)")
	case token == "":
		return errors.New("SECKILL_USER_TOKEN is not set: the proof is only given to its entrant")
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	cl := draw.Client{Base: *gateway}
	rec, err := cl.Record(ctx, *session, *prize)
	if err != nil {
		return err
	}
	p, err := cl.Proof(ctx, *session, *prize, token)
	if err != nil {
		return err
	}
	out := report{Session: *session, Prize: *prize, User: p.User, Entries: rec.Entries, Root: rec.Root, Commitment: rec.Commitment}
	checkErr := check(rec, p, pins{commitment: *commitment, root: *root, beaconRound: *beaconRound, beaconKey: *beaconKey}, &out)
	if checkErr != nil {
		out.Error = checkErr.Error()
	}
	if *asJSON {
		if err := json.NewEncoder(stdout).Encode(out); err != nil {
			return err
		}
	} else {
		out.print(stdout)
	}
	if checkErr != nil {
		return errors.New("the draw does not check for you")
	}
	return nil
}

// report is verify-draw's verdict.
type report struct {
	Session       int64  `json:"session_id"`
	Prize         int64  `json:"prize_id"`
	User          string `json:"user_id"`
	Entries       int    `json:"entries"`
	Root          string `json:"merkle_root"`
	Commitment    string `json:"commitment"`
	BeaconChecked bool   `json:"beacon_checked"`
	BeaconKey     string `json:"beacon_key,omitempty"` // whose key the beacon was checked with
	Place         int    `json:"place,omitempty"`
	Status        string `json:"status,omitempty"`
	Waitlist      int    `json:"waitlist_position,omitempty"`
	Error         string `json:"error,omitempty"`
}

// pins are what the buyer saw earlier and the record must still say.
type pins struct {
	commitment, root, beaconKey string
	beaconRound                 uint64
}

// check runs draw.Verify, with the pins the buyer gave: a record whose commitment, root or
// beacon round changed since the buyer saw them is refused even if it is consistent in
// itself (a round chosen after the fact could be one that ranks a friend first).
func check(rec draw.Record, p draw.Proof, pin pins, out *report) error {
	if pin.commitment != "" && !strings.EqualFold(pin.commitment, rec.Commitment) {
		return fmt.Errorf("%w: the record commits to %s, you saw %s", draw.ErrCommitment, rec.Commitment, pin.commitment)
	}
	if pin.root != "" && !strings.EqualFold(pin.root, rec.Root) {
		return fmt.Errorf("%w: the record's root is %s, you saw %s", draw.ErrInclusion, rec.Root, pin.root)
	}
	if pin.beaconRound != 0 && (rec.Beacon == nil || rec.Beacon.Round != pin.beaconRound) {
		return fmt.Errorf("%w: the record does not name round %d, which you saw", draw.ErrBeacon, pin.beaconRound)
	}
	var checker draw.BeaconChecker
	if rec.Beacon != nil {
		key := pin.beaconKey
		if key == "" {
			key = rec.Beacon.PublicKey
		}
		d, err := draw.NewDrand(rec.Beacon.Scheme, key)
		if err != nil {
			return fmt.Errorf("%w: %w", draw.ErrBeacon, err)
		}
		checker, out.BeaconKey = d, key
	}
	v, err := draw.Verify(rec, p, checker)
	if err != nil {
		return err
	}
	out.BeaconChecked = v.BeaconChecked
	out.Place, out.Status, out.Waitlist = v.Standing.Place, v.Standing.Status, v.Standing.WaitlistPosition
	return nil
}

func (r report) print(w io.Writer) {
	fmt.Fprintf(w, "draw of session %d prize %d: %d entries, Merkle root %s\n", r.Session, r.Prize, r.Entries, r.Root)
	fmt.Fprintf(w, "commitment %s\n", r.Commitment)
	if r.Error != "" {
		fmt.Fprintf(w, "NOT VERIFIED for %s: %s\n", r.User, r.Error)
		return
	}
	switch {
	case r.BeaconChecked:
		fmt.Fprintf(w, "beacon: signature checked against public key %s\n", r.BeaconKey)
	default:
		fmt.Fprintln(w, "beacon: none (the seed alone ranks)")
	}
	fmt.Fprintf(w, "verified for %s: your entry is in the frozen set, your ranking value is right, and your place is %d of %d: %s",
		r.User, r.Place, r.Entries, r.Status)
	if r.Status == draw.StatusWaitlisted {
		fmt.Fprintf(w, " (%d before you on the waitlist)", r.Waitlist-1)
	}
	fmt.Fprintln(w)
}

func envOr(getenv func(string) string, key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}
