package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/keelinit/keel/services/notify"
)

// syslogdCmd is the appliance's log daemon: it reads datagrams from a unix
// socket and appends them, timestamped, to a file. It reopens the file on
// SIGHUP (for rotation) and signals READY=1 once bound.
func syslogdCmd() *cobra.Command {
	var sock, out string
	cmd := &cobra.Command{
		Use:   "syslogd",
		Short: "Run the appliance's datagram log daemon (started by rc.d/syslogd)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSyslogd(sock, out)
		},
	}
	cmd.Flags().StringVar(&sock, "socket", "", "unix datagram socket to listen on")
	cmd.Flags().StringVar(&out, "output", "", "log file to append to")
	_ = cmd.MarkFlagRequired("socket")
	_ = cmd.MarkFlagRequired("output")
	return cmd
}

func runSyslogd(sock, out string) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	open := func() (*os.File, error) { return os.OpenFile(out, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640) }
	f, err := open()
	if err != nil {
		return err
	}
	_ = os.Remove(sock)
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		return err
	}
	_ = os.Chmod(sock, 0o666)
	host, _ := os.Hostname()
	var mu sync.Mutex
	write := func(msg string) {
		mu.Lock()
		defer mu.Unlock()
		_, _ = io.WriteString(f, syslogLine(time.Now(), host, msg))
	}
	write(fmt.Sprintf("syslogd[%d]: listening on %s", os.Getpid(), sock))
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		for s := range sigs {
			if s == syscall.SIGHUP {
				nf, err := open()
				if err == nil {
					mu.Lock()
					old := f
					f = nf
					mu.Unlock()
					old.Close()
				}
				continue
			}
			write(fmt.Sprintf("syslogd[%d]: exiting on %v", os.Getpid(), s))
			conn.Close()
			return
		}
	}()
	if _, err := notify.Send("READY=1\nSTATUS=logging to " + out); err != nil {
		fmt.Fprintln(os.Stderr, "syslogd:", err)
	}
	buf := make([]byte, 8192)
	for {
		n, _, err := conn.ReadFromUnix(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				_ = os.Remove(sock)
				mu.Lock()
				defer mu.Unlock()
				return f.Close()
			}
			return err
		}
		write(string(buf[:n]))
	}
}

// syslogLine formats one datagram as a log file line: "timestamp host
// message\n". Senders are any local process (the socket is 0666, as
// /dev/log is), so the message is escaped the way rsyslog does: control
// characters other than tab (C0, DEL and C1) become "#ooo" (octal), so that a datagram
// cannot forge further log lines or carry terminal escapes; invalid UTF-8
// becomes U+FFFD. Trailing newlines and NULs (which syslog(3) clients
// send) are dropped.
func syslogLine(now time.Time, host, msg string) string {
	msg = strings.TrimRight(msg, "\n\x00")
	var b strings.Builder
	b.Grow(len(msg) + 48)
	b.WriteString(now.Format(time.StampMilli))
	b.WriteByte(' ')
	b.WriteString(host)
	b.WriteByte(' ')
	for _, r := range strings.ToValidUTF8(msg, "\uFFFD") {
		if unicode.IsControl(r) && r != '\t' {
			fmt.Fprintf(&b, "#%03o", r)
			continue
		}
		b.WriteRune(r)
	}
	b.WriteByte('\n')
	return b.String()
}
