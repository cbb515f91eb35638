package e2e

import (
	"context"
	cryptorand "crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	mathrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

const helperEnv = "KEEL_E2E_HELPER"

var (
	binDir   string // holds the built keeld and keelctl
	buildErr error
)

func TestMain(m *testing.M) {
	if h := os.Getenv(helperEnv); h != "" {
		os.Exit(helper(h, os.Args[len(os.Args)-2:]))
	}
	dir, err := os.MkdirTemp("", "keel-e2e-bin")
	if err == nil && os.Geteuid() == 0 {
		sweepStale()
		binDir = dir
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		out, err := exec.CommandContext(ctx, "go", "build", "-o", dir+string(filepath.Separator),
			"github.com/keelinit/keel/cmd/keeld", "github.com/keelinit/keel/cmd/keelctl").CombinedOutput()
		cancel()
		if err != nil {
			buildErr = fmt.Errorf("go build ./cmd/keeld ./cmd/keelctl: %v\n%s", err, out)
		}
	}
	code := m.Run()
	if dir != "" {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}

// helper runs in a namespace as a TCP endpoint (see tcpTransfer):
//
//	sink ADDR:     accept one connection, read to EOF, print "BYTES SHA256"
//	source ADDR N: connect, send N pseudo-random bytes paced at the rate in
//	               KEEL_E2E_RATE (bytes/s, 0: unpaced), print "N SHA256"
func helper(mode string, args []string) int {
	addr := args[1]
	h := sha256.New()
	var n int64
	switch mode {
	case "sink":
		l, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println("listening")
		l.(*net.TCPListener).SetDeadline(time.Now().Add(60 * time.Second))
		c, err := l.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		c.SetDeadline(time.Now().Add(60 * time.Second))
		n, err = io.Copy(h, c)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	case "source":
		total, _ := strconv.ParseInt(os.Getenv("KEEL_E2E_BYTES"), 10, 64)
		rate, _ := strconv.ParseInt(os.Getenv("KEEL_E2E_RATE"), 10, 64)
		var c net.Conn
		var err error
		for i := 0; i < 50; i++ { // the sink may not listen yet
			if c, err = net.DialTimeout("tcp", addr, 2*time.Second); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		c.SetDeadline(time.Now().Add(60 * time.Second))
		var seed [32]byte
		cryptorand.Read(seed[:])
		rng := mathrand.NewChaCha8(seed)
		buf := make([]byte, 64<<10)
		start := time.Now()
		for n < total {
			k := min(int64(len(buf)), total-n)
			rng.Read(buf[:k])
			h.Write(buf[:k])
			if _, err := c.Write(buf[:k]); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			n += k
			if rate > 0 {
				if ahead := time.Duration(float64(n)/float64(rate)*float64(time.Second)) - time.Since(start); ahead > 0 {
					time.Sleep(ahead)
				}
			}
		}
		c.Close()
	default:
		return 2
	}
	fmt.Println(n, hex.EncodeToString(h.Sum(nil)))
	return 0
}

func cryptoRead(b []byte) (int, error) { return cryptorand.Read(b) }
