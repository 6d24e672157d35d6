package draw

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Client fetches a draw's public record and one entrant's proof from a gateway's public API
// with nothing but that entrant's own token: all a buyer needs to check their place
// (Verify), and all the verify-draw command uses.
type Client struct {
	Base string       // the gateway's public URL, e.g. https://shop.example/
	HTTP *http.Client // nil: http.DefaultClient
}

// Record fetches the public record of a session×prize's draw.
func (c Client) Record(ctx context.Context, sessionID, prizeID int64) (Record, error) {
	var rec Record
	err := c.get(ctx, fmt.Sprintf("/api/v1/sessions/%d/prizes/%d/draw", sessionID, prizeID), "", &rec)
	return rec, err
}

// Proof fetches the proof of the user whose bearer token is token.
func (c Client) Proof(ctx context.Context, sessionID, prizeID int64, token string) (Proof, error) {
	var p Proof
	err := c.get(ctx, fmt.Sprintf("/api/v1/sessions/%d/prizes/%d/draw/proof", sessionID, prizeID), token, &p)
	return p, err
}

// get reads one JSON document, naming the URL and the server's answer on a failure.
func (c Client) get(ctx context.Context, path, token string, into any) error {
	url := strings.TrimRight(c.Base, "/") + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	// A drawn record of a million entrants is about 70 MB of ranking values.
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, into); err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	return nil
}
