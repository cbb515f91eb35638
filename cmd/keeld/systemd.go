package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/coreos/go-systemd/v22/activation"
	"github.com/coreos/go-systemd/v22/daemon"
)

// systemd integrates keeld with a supervising systemd when NOTIFY_SOCKET
// is set: STATUS= and EXTEND_TIMEOUT_USEC during boot, READY=1, the
// watchdog, and STOPPING=1. Without systemd every method is a no-op.
type systemd struct {
	log     *slog.Logger
	enabled bool
	mu      sync.Mutex
	last    time.Time
	stopWD  chan struct{}
}

func newSystemd(log *slog.Logger) *systemd {
	s := &systemd{log: log, enabled: os.Getenv("NOTIFY_SOCKET") != "", stopWD: make(chan struct{})}
	if !s.enabled {
		return s
	}
	s.notify("STATUS=booting")
	if iv, err := daemon.SdWatchdogEnabled(false); err == nil && iv > 0 {
		log.Info(fmt.Sprintf("systemd watchdog every %v", iv))
		go func() {
			t := time.NewTicker(iv / 2)
			defer t.Stop()
			for {
				select {
				case <-t.C:
					s.notify(daemon.SdNotifyWatchdog)
				case <-s.stopWD:
					return
				}
			}
		}()
	}
	return s
}

func (s *systemd) notify(state string) {
	if !s.enabled {
		return
	}
	if _, err := daemon.SdNotify(false, state); err != nil {
		s.log.Warn("sd_notify: " + err.Error())
	}
}

// progress extends systemd's start timeout while the boot makes progress
// (at most every 100 ms) and publishes STATUS=.
func (s *systemd) progress(done, total int, name string) {
	if !s.enabled {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Since(s.last) < 100*time.Millisecond && done < total {
		return
	}
	s.last = time.Now()
	s.notify(fmt.Sprintf("STATUS=booting: %d/%d (%s)\nEXTEND_TIMEOUT_USEC=%d", done, total, name, (30 * time.Second).Microseconds()))
}

func (s *systemd) ready(status string) {
	s.notify(daemon.SdNotifyReady + "\nSTATUS=" + status)
}

func (s *systemd) stopping() {
	s.notify(daemon.SdNotifyStopping + "\nSTATUS=stopping services")
	select {
	case <-s.stopWD:
	default:
		close(s.stopWD)
	}
}

// activationListeners returns the sockets passed by systemd socket
// activation (LISTEN_FDS), if any.
func activationListeners() []net.Listener {
	ls, err := activation.Listeners()
	if err != nil {
		return nil
	}
	var out []net.Listener
	for _, l := range ls {
		if l != nil {
			out = append(out, l)
		}
	}
	return out
}
