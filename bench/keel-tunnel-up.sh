#!/usr/bin/env bash
# bench/keel-tunnel-up.sh WORKDIR NSA NSB: boots a keeld in each of the two
# namespaces of bench/tunnel.sh, each on its own root under WORKDIR (the
# repository's etc/rc.d and etc/defaults, an rc.conf with the gateway
# settings, an ipsec.conf with mirrored SAs: AES-128-GCM, ESP in UDP/4500,
# fresh random keys), with A = 10.99.0.1 on vA and B = 10.99.0.2 on vB
# outside, and tunnel addresses 10.98.0.1 (A) and 10.98.0.2 (B) on the TUN
# keel0. Writes the keeld PIDs to WORKDIR/keel.pids (their control sockets
# are WORKDIR/keel{A,B}.sock, for keelctl --socket) and returns once a ping
# through the tunnel works. On failure it stops what it started and exits
# non-zero.
#
# Environment: KEEL_CRYPTODEV (cryptodev_modules, default "cryptosoft"),
# KEEL_KLD (kld_list, default "aesni"), KEEL_ENCAP (ipsec_encap: udp or
# esp), KEEL_MTU (ipsec_tun_mtu, default 1420 like wireguard-go's wg0),
# KEEL_BIN (a directory with prebuilt keeld and keelctl).
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: $0 WORKDIR NSA NSB" >&2; exit 2; }
WORK=$1 NSA=$2 NSB=$3
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CRYPTODEV=${KEEL_CRYPTODEV:-cryptosoft}
KLD=${KEEL_KLD:-aesni}
ENCAP=${KEEL_ENCAP:-udp}
MTU=${KEEL_MTU:-1420}
BIN=${KEEL_BIN:-$WORK/bin}
if [ ! -x "$BIN/keeld" ] || [ ! -x "$BIN/keelctl" ]; then
	mkdir -p "$BIN"
	(cd "$ROOT" && timeout 300 go build -o "$BIN/" ./cmd/keeld ./cmd/keelctl)
fi

proto=esp-udp
[ "$ENCAP" = esp ] && proto=esp
hex() { od -An -N"$1" -tx1 /dev/urandom | tr -d ' \n'; }
KAB=0x$(hex 20) # A->B: AES-128 key || 4-byte salt
KBA=0x$(hex 20)

conf() { # conf LOCAL PEER INNERLOCAL INNERPEER OUTKEY INKEY OUTSPI INSPI
	cat <<CONF
flush;
spdflush;
add $1 $2 $proto $7 -m tunnel -r 256 -E aes-gcm-16 $5;
add $2 $1 $proto $8 -m tunnel -r 256 -E aes-gcm-16 $6;
spdadd $3 $4 any -P out ipsec esp/tunnel/$1-$2/require;
spdadd $4 $3 any -P in ipsec esp/tunnel/$2-$1/require;
CONF
}
rcconf() { # rcconf SIDE LOCAL PEER INNER
	cat <<RC
hostname="keel$1"
cryptodev_modules="$CRYPTODEV"
kld_list="$KLD"
ipsec_enable="YES"
ipsec_tun="keel0"
ipsec_local="$2"
ipsec_peer="$3"
ipsec_encap="$ENCAP"
ipsec_tun_addr="$4/24"
ipsec_tun_mtu="$MTU"
RC
}
mkroot() { # mkroot SIDE LOCAL PEER INNERLOCAL INNERPEER OUTKEY INKEY OUTSPI INSPI
	local r="$WORK/root$1"
	rm -rf "$r"
	mkdir -p "$r/etc"
	cp -r "$ROOT/etc/defaults" "$ROOT/etc/rc.d" "$r/etc/"
	rcconf "$1" "$2" "$3" "$4" >"$r/etc/rc.conf"
	conf "$2" "$3" "$4" "$5" "$6" "$7" "$8" "$9" >"$r/etc/ipsec.conf"
}
mkroot A 10.99.0.1 10.99.0.2 10.98.0.1 10.98.0.2 "$KAB" "$KBA" 0x1001 0x2001
mkroot B 10.99.0.2 10.99.0.1 10.98.0.2 10.98.0.1 "$KBA" "$KAB" 0x2001 0x1001

PIDS=()
fail() {
	echo "keel-tunnel-up: $*" >&2
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	tail -8 "$WORK"/keel[AB].log >&2 2>/dev/null || true
	exit 1
}
start() { # start SIDE NS
	ip netns exec "$2" "$BIN/keeld" --root "$WORK/root$1" --runtime-dir "$WORK/run$1" \
		--socket "$WORK/keel$1.sock" --log-format text >"$WORK/keel$1.log" 2>&1 &
	PIDS+=($!) # ip netns exec execs keeld: same PID
}
start A "$NSA"
start B "$NSB"
echo "${PIDS[*]}" >"$WORK/keel.pids"
for side in A B; do
	up=
	for _ in $(seq 200); do
		# exit 0 once the ipsec service (engine and gateway) is running
		if "$BIN/keelctl" --socket "$WORK/keel$side.sock" status ipsec >/dev/null 2>&1; then
			up=1
			break
		fi
		kill -0 "${PIDS[0]}" 2>/dev/null && kill -0 "${PIDS[1]}" 2>/dev/null || fail "a keeld exited"
		sleep 0.1
	done
	[ -n "$up" ] || fail "keeld $side: ipsec did not come up in 20 s"
done
for _ in $(seq 20); do
	if ip netns exec "$NSA" ping -c 1 -W 1 10.98.0.2 >/dev/null 2>&1; then
		echo "keel tunnel up: keeld pids ${PIDS[*]}"
		"$BIN/keelctl" --socket "$WORK/keelA.sock" ipsec if
		exit 0
	fi
done
fail "no ping through the tunnel"
