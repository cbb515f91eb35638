#!/usr/bin/env bash
# bench/keel-tunnel-up.sh WORKDIR NSA NSB: starts a Keel IPsec gateway
# (cmd/keel-gw: AES-128-GCM, ESP in UDP/4500, fresh random keys) in each of
# the two namespaces of bench/tunnel.sh, with A = 10.99.0.1 on vA and
# B = 10.99.0.2 on vB outside, and tunnel addresses 10.98.0.1 (A) and
# 10.98.0.2 (B) on the TUN keel0. Writes the daemon PIDs to
# WORKDIR/keel.pids and returns once a ping through the tunnel works.
# On failure it stops what it started and exits non-zero.
#
# Environment: KEEL_KLD ("cryptosoft aesni" by default: providers loaded at
# start), KEEL_ENCAP (udp or esp), KEEL_MTU (TUN MTU, default 1420 like
# wireguard-go's wg0), KEEL_GW (a prebuilt keel-gw binary), KEEL_PROFILE
# (write CPU profiles to $KEEL_PROFILE.A and .B until the daemons exit).
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: $0 WORKDIR NSA NSB" >&2; exit 2; }
WORK=$1 NSA=$2 NSB=$3
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KLD=${KEEL_KLD:-cryptosoft aesni}
ENCAP=${KEEL_ENCAP:-udp}
MTU=${KEEL_MTU:-1420}
BIN=${KEEL_GW:-$WORK/bin/keel-gw}
mkdir -p "$WORK/bin"
if [ ! -x "$BIN" ]; then
	(cd "$ROOT" && timeout 300 go build -o "$BIN" ./cmd/keel-gw)
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
conf 10.99.0.1 10.99.0.2 10.98.0.1 10.98.0.2 "$KAB" "$KBA" 0x1001 0x2001 >"$WORK/keelA.conf"
conf 10.99.0.2 10.99.0.1 10.98.0.2 10.98.0.1 "$KBA" "$KAB" 0x2001 0x1001 >"$WORK/keelB.conf"

PIDS=()
fail() {
	echo "keel-tunnel-up: $*" >&2
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	tail -5 "$WORK"/keel[AB].log >&2 2>/dev/null || true
	exit 1
}
start() { # start SIDE NS LOCAL PEER INNER
	local prof=()
	[ -z "${KEEL_PROFILE:-}" ] || prof=(-cpuprofile "$KEEL_PROFILE.$1")
	ip netns exec "$2" "$BIN" "${prof[@]}" -ctl "$WORK/keel$1.sock" -pidfile "$WORK/keel$1.pid" \
		ipsec_file="$WORK/keel$1.conf" kld_list="$KLD" ipsec_tun=keel0 \
		ipsec_local="$3" ipsec_peer="$4" ipsec_encap="$ENCAP" \
		ipsec_tun_addr="$5/24" ipsec_tun_mtu="$MTU" >"$WORK/keel$1.log" 2>&1 &
	PIDS+=($!)
}
start A "$NSA" 10.99.0.1 10.99.0.2 10.98.0.1
start B "$NSB" 10.99.0.2 10.99.0.1 10.98.0.2
echo "${PIDS[*]}" >"$WORK/keel.pids"
for side in A B; do
	for _ in $(seq 100); do
		[ -s "$WORK/keel$side.pid" ] && break
		kill -0 "${PIDS[0]}" 2>/dev/null && kill -0 "${PIDS[1]}" 2>/dev/null || fail "a gateway exited"
		sleep 0.1
	done
	[ -s "$WORK/keel$side.pid" ] || fail "gateway $side did not come up"
done
for _ in $(seq 20); do
	if ip netns exec "$NSA" ping -c 1 -W 1 10.98.0.2 >/dev/null 2>&1; then
		echo "keel tunnel up: pids ${PIDS[*]}"
		exit 0
	fi
done
fail "no ping through the tunnel"
