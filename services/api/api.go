// Package api is keeld's control API: HTTP+JSON over a unix socket. Read
// calls (GET) are open to whoever can connect (the socket is 0660, so the
// socket's group); calls that change state (POST) require the peer, as
// reported by SO_PEERCRED and SO_PEERGROUPS when it connected, to be root,
// keeld's own uid, or a member of the configured control group.
//
// No reader can exhaust keeld: connections are capped in total and per
// uid, with a share kept for root and keeld's uid (Limits, scaled to the
// descriptor limit), and every connection has idle, read and write
// timeouts. Over a limit a connection is answered 503 and closed at once.
package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// ErrPermission is returned by the client when keeld refused a call
// because the caller may not change state.
var ErrPermission = errors.New("permission denied")

// ErrNotFound is returned by the client for an unknown object.
var ErrNotFound = errors.New("not found")

// Error is the JSON body of every non-2xx response.
type Error struct {
	Error string `json:"error"`
}

// Client talks to keeld over its unix socket. It is safe for concurrent
// use.
type Client struct {
	Socket string
	http   *http.Client
}

// NewClient returns a client for the socket at path.
func NewClient(path string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		DisableCompression: true,
	}
	return &Client{Socket: path, http: &http.Client{Transport: tr, Timeout: 2 * time.Minute}}
}

// Get fetches path and decodes the JSON answer into out (or, when out is
// *[]byte, stores the raw body).
func (c *Client) Get(ctx context.Context, path string, q url.Values, out any) error {
	u := "http://keeld" + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	return c.do(req, out)
}

// Post sends in as JSON to path and decodes the answer into out (nil to
// discard).
func (c *Client) Post(ctx context.Context, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://keeld"+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	return c.do(req, out)
}

func (c *Client) do(req *http.Request, out any) error {
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("keeld at %s: %w", c.Socket, unwrapURL(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var e Error
		msg := string(bytes.TrimSpace(body))
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		switch resp.StatusCode {
		case http.StatusForbidden:
			return fmt.Errorf("%w: %s", ErrPermission, msg)
		case http.StatusNotFound:
			return fmt.Errorf("%w: %s", ErrNotFound, msg)
		}
		return errors.New(msg)
	}
	if out == nil {
		return nil
	}
	if raw, ok := out.(*[]byte); ok {
		*raw = body
		return nil
	}
	return json.Unmarshal(body, out)
}

func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// Peer is the credential of the connected client, as the kernel recorded
// it when the client connected.
type Peer struct {
	PID, UID, GID int
	// Groups are the supplementary groups.
	Groups []int `json:",omitempty"`
}

type peerKey struct{}

// PeerFrom returns the peer credentials attached to a request context by
// the server.
func PeerFrom(ctx context.Context) (Peer, bool) {
	p, ok := ctx.Value(peerKey{}).(Peer)
	return p, ok
}

// WriteJSON writes v as indented JSON with status code.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// WriteError writes err as an Error with code.
func WriteError(w http.ResponseWriter, code int, err error) {
	WriteJSON(w, code, Error{Error: err.Error()})
}

// IntParam reads a non-negative integer query parameter.
func IntParam(r *http.Request, name string, def int) int {
	if v, err := strconv.Atoi(r.URL.Query().Get(name)); err == nil && v >= 0 {
		return v
	}
	return def
}
