package netio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ConfigureInterface brings the interface name up, adds the addresses
// (existing ones are kept) and adds a route through the interface for every
// prefix in routes (an existing route is replaced). It talks rtnetlink
// directly, so it needs CAP_NET_ADMIN in the interface's network namespace.
func ConfigureInterface(name string, addrs, routes []netip.Prefix) error {
	ifi, s, err := openRTNetlink(name)
	if err != nil {
		return err
	}
	defer unix.Close(s)
	// link up
	{
		var b nlBuf
		b.header(unix.RTM_NEWLINK, unix.NLM_F_REQUEST|unix.NLM_F_ACK)
		ifim := unix.IfInfomsg{Family: unix.AF_UNSPEC, Index: int32(ifi.Index), Flags: unix.IFF_UP, Change: unix.IFF_UP}
		b.raw(unsafe.Slice((*byte)(unsafe.Pointer(&ifim)), unix.SizeofIfInfomsg))
		if err := b.do(s); err != nil {
			return fmt.Errorf("netio: %s up: %w", name, err)
		}
	}
	for _, a := range addrs {
		var b nlBuf
		b.header(unix.RTM_NEWADDR, unix.NLM_F_REQUEST|unix.NLM_F_ACK|unix.NLM_F_CREATE|unix.NLM_F_REPLACE)
		fam := family(a.Addr())
		ifa := unix.IfAddrmsg{Family: fam, Prefixlen: uint8(a.Bits()), Index: uint32(ifi.Index)}
		b.raw(unsafe.Slice((*byte)(unsafe.Pointer(&ifa)), unix.SizeofIfAddrmsg))
		ip := a.Addr().Unmap().AsSlice()
		b.attr(unix.IFA_LOCAL, ip)
		b.attr(unix.IFA_ADDRESS, ip)
		if err := b.do(s); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("netio: %s address %v: %w", name, a, err)
		}
	}
	for _, r := range routes {
		b := routeMsg(unix.RTM_NEWROUTE, unix.NLM_F_CREATE|unix.NLM_F_REPLACE, r, ifi.Index)
		if err := b.do(s); err != nil {
			return fmt.Errorf("netio: route %v dev %s: %w", r.Masked(), name, err)
		}
	}
	return nil
}

// RemoveRoutes removes the routes of the prefixes in routes through the
// interface name (those ConfigureInterface added); a route that is not
// there is not an error. Like ConfigureInterface it needs CAP_NET_ADMIN.
func RemoveRoutes(name string, routes []netip.Prefix) error {
	ifi, s, err := openRTNetlink(name)
	if err != nil {
		return err
	}
	defer unix.Close(s)
	for _, r := range routes {
		b := routeMsg(unix.RTM_DELROUTE, 0, r, ifi.Index)
		if err := b.do(s); err != nil && !errors.Is(err, unix.ESRCH) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("netio: remove route %v dev %s: %w", r.Masked(), name, err)
		}
	}
	return nil
}

// openRTNetlink looks up the interface name and opens a bound rtnetlink
// socket; the caller closes it.
func openRTNetlink(name string) (*net.Interface, int, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return nil, -1, fmt.Errorf("netio: interface %s: %w", name, err)
	}
	s, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, -1, fmt.Errorf("netio: netlink: %w", err)
	}
	if err := unix.Bind(s, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(s)
		return nil, -1, fmt.Errorf("netio: netlink bind: %w", err)
	}
	return ifi, s, nil
}

// routeMsg builds an RTM_NEWROUTE or RTM_DELROUTE request for the static
// link-scope route of r through the interface with index ifindex, in the
// main table.
func routeMsg(typ, flags uint16, r netip.Prefix, ifindex int) *nlBuf {
	r = r.Masked()
	b := &nlBuf{}
	b.header(typ, unix.NLM_F_REQUEST|unix.NLM_F_ACK|flags)
	rtm := unix.RtMsg{Family: family(r.Addr()), Dst_len: uint8(r.Bits()), Table: unix.RT_TABLE_MAIN,
		Protocol: unix.RTPROT_STATIC, Scope: unix.RT_SCOPE_LINK, Type: unix.RTN_UNICAST}
	b.raw(unsafe.Slice((*byte)(unsafe.Pointer(&rtm)), unix.SizeofRtMsg))
	b.attr(unix.RTA_DST, r.Addr().Unmap().AsSlice())
	var idx [4]byte
	binary.NativeEndian.PutUint32(idx[:], uint32(ifindex))
	b.attr(unix.RTA_OIF, idx[:])
	return b
}

func family(a netip.Addr) uint8 {
	if a.Unmap().Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

var nlSeq atomic.Uint32

// nlBuf builds one netlink request.
type nlBuf struct{ b []byte }

func (b *nlBuf) header(typ uint16, flags uint16) {
	b.b = make([]byte, unix.SizeofNlMsghdr, 128)
	binary.NativeEndian.PutUint16(b.b[4:], typ)
	binary.NativeEndian.PutUint16(b.b[6:], flags)
	binary.NativeEndian.PutUint32(b.b[8:], nlSeq.Add(1))
}

func (b *nlBuf) raw(p []byte) {
	b.b = append(b.b, p...)
	for len(b.b)%4 != 0 {
		b.b = append(b.b, 0)
	}
}

func (b *nlBuf) attr(typ uint16, data []byte) {
	var h [4]byte
	binary.NativeEndian.PutUint16(h[0:], uint16(4+len(data)))
	binary.NativeEndian.PutUint16(h[2:], typ)
	b.raw(append(h[:], data...))
}

// do sends the request and waits for its ACK.
func (b *nlBuf) do(s int) error {
	binary.NativeEndian.PutUint32(b.b[0:], uint32(len(b.b)))
	seq := binary.NativeEndian.Uint32(b.b[8:])
	if err := unix.Sendto(s, b.b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	rb := make([]byte, os.Getpagesize())
	for {
		n, _, err := unix.Recvfrom(s, rb, 0)
		if err != nil {
			return err
		}
		msgs, err := syscall.ParseNetlinkMessage(rb[:n])
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if m.Header.Seq != seq {
				continue
			}
			if m.Header.Type == unix.NLMSG_ERROR && len(m.Data) >= 4 {
				if code := int32(binary.NativeEndian.Uint32(m.Data[:4])); code != 0 {
					return syscall.Errno(-code)
				}
				return nil
			}
		}
	}
}
