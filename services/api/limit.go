package api

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Limits bound the connections the control API keeps open, so that a
// member of the socket group cannot exhaust keeld's file descriptors and
// memory, and so that root can always get in. Zero fields take the
// defaults of DefaultLimits.
type Limits struct {
	// MaxConns is the most connections open at once, from everyone.
	MaxConns int
	// MaxConnsPerUID is the most connections open at once from one uid
	// other than root and keeld's own.
	MaxConnsPerUID int
	// Reserved of MaxConns are kept for root and keeld's own uid: other
	// uids together hold at most MaxConns-Reserved.
	Reserved int
}

// DefaultLimits scales the limits to the file descriptor limit: the API
// never holds more than an eighth of RLIMIT_NOFILE (at most 128
// connections), leaving the rest to supervision (a daemon start needs
// about six descriptors), the crypto providers and the IPsec gateway.
// Root and keeld's uid keep an eighth of that for themselves; another uid
// gets an eighth.
func DefaultLimits() Limits {
	n := 128
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil && rl.Cur/8 < uint64(n) {
		n = max(int(rl.Cur/8), 4)
	}
	return Limits{MaxConns: n, MaxConnsPerUID: max(n/8, 1), Reserved: max(n/8, 1)}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxConns <= 0 {
		l.MaxConns = d.MaxConns
	}
	if l.MaxConnsPerUID <= 0 {
		l.MaxConnsPerUID = min(d.MaxConnsPerUID, l.MaxConns)
	}
	if l.Reserved <= 0 {
		l.Reserved = min(d.Reserved, l.MaxConns-1)
	}
	return l
}

// ConnStats counts the control API's connections.
type ConnStats struct {
	Open    int    // open now
	Refused uint64 // refused since start, over a limit or without credentials
}

// connLimiter counts the connections of all of a Server's listeners
// against its Limits.
type connLimiter struct {
	lim      Limits
	self     int // keeld's uid, privileged like root
	log      *slog.Logger
	refused  atomic.Uint64
	drainers chan struct{} // semaphore of maxDrainers

	mu          sync.Mutex
	open, unpri int
	perUID      map[int]int
	lastLog     time.Time // refusals are logged at most every refuseLogEvery
	unlogged    uint64
}

// refuseLogEvery spaces the log lines about refused connections, so that a
// flood does not flood the log.
const refuseLogEvery = 10 * time.Second

// Refused connections drained at once, and for how long each (see refuse).
const (
	maxDrainers = 4
	drainFor    = 200 * time.Millisecond
)

func newConnLimiter(lim Limits, log *slog.Logger) *connLimiter {
	return &connLimiter{lim: lim.withDefaults(), self: os.Getuid(), log: log, perUID: map[int]int{},
		drainers: make(chan struct{}, maxDrainers)}
}

// limitListener admits a connection only within its limiter's Limits,
// reading the peer's credentials once, at accept time; a refused
// connection gets a 503 and is closed at once, so it holds no descriptor.
type limitListener struct {
	net.Listener
	l *connLimiter
}

// Accept returns the next admitted connection, as a *peerConn.
func (ll limitListener) Accept() (net.Conn, error) {
	l := ll.l
	for {
		c, err := ll.Listener.Accept()
		if err != nil {
			return nil, err
		}
		p, err := peerCred(c)
		if err != nil {
			l.refuse(c, -1, fmt.Sprintf("peer credentials: %v", err))
			continue
		}
		if why := l.admit(p.UID); why != "" {
			l.refuse(c, p.UID, why)
			continue
		}
		return &peerConn{Conn: c, peer: p, l: l}, nil
	}
}

func (l *connLimiter) privileged(uid int) bool { return uid == 0 || uid == l.self }

// admit takes a slot for uid, or says why there is none.
func (l *connLimiter) admit(uid int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.open >= l.lim.MaxConns:
		return fmt.Sprintf("%d connections open (limit %d)", l.open, l.lim.MaxConns)
	case l.privileged(uid):
	case l.perUID[uid] >= l.lim.MaxConnsPerUID:
		return fmt.Sprintf("uid %d has %d connections open (limit %d per uid)", uid, l.perUID[uid], l.lim.MaxConnsPerUID)
	case l.unpri >= l.lim.MaxConns-l.lim.Reserved:
		return fmt.Sprintf("%d connections open from unprivileged uids (limit %d)", l.unpri, l.lim.MaxConns-l.lim.Reserved)
	default:
		l.unpri++
		l.perUID[uid]++
	}
	l.open++
	return ""
}

func (l *connLimiter) release(uid int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if !l.privileged(uid) {
		l.unpri--
		if l.perUID[uid]--; l.perUID[uid] <= 0 {
			delete(l.perUID, uid)
		}
	}
}

// refuse answers 503 (a fresh socket's send buffer takes the few bytes at
// once; the deadline only guards against the impossible) and closes c.
// A client that has not sent its request yet would get EPIPE instead of
// the answer if c closed at once, so up to maxDrainers refused
// connections are half-closed and wait (at most drainFor) for the
// request to arrive before they close.
func (l *connLimiter) refuse(c net.Conn, uid int, why string) {
	l.refused.Add(1)
	body := fmt.Sprintf("{\"error\": %q}\n", "keeld: connection refused: "+why)
	_ = c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	_, _ = fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	select {
	case l.drainers <- struct{}{}:
		go func() {
			defer func() { <-l.drainers }()
			if cw, ok := c.(interface{ CloseWrite() error }); ok {
				_ = cw.CloseWrite()
			}
			_ = c.SetReadDeadline(time.Now().Add(drainFor))
			_, _ = c.Read(make([]byte, 4096))
			_ = c.Close()
		}()
	default:
		_ = c.Close()
	}
	l.mu.Lock()
	now := time.Now()
	n := l.unlogged + 1
	logIt := now.Sub(l.lastLog) >= refuseLogEvery
	if logIt {
		l.lastLog, l.unlogged = now, 0
	} else {
		l.unlogged = n
	}
	l.mu.Unlock()
	if logIt {
		l.log.Warn("control: refused connection", "uid", uid, "reason", why, "refused_since_last_report", n)
	}
}

func (l *connLimiter) stats() ConnStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return ConnStats{Open: l.open, Refused: l.refused.Load()}
}

// peerConn is an admitted connection with the credentials read at accept.
type peerConn struct {
	net.Conn
	peer Peer
	l    *connLimiter
	once sync.Once
}

// Close closes the connection and frees its slot (once).
func (c *peerConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.peer.UID) })
	return err
}
