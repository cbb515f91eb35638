package setkey_test

import (
	"fmt"
	"strings"

	"github.com/keelinit/keel/ipsec/setkey"
)

func Example() {
	const conf = `
# tunnel 10.0.0.0/24 <-> 10.0.1.0/24
add 192.0.2.1 192.0.2.2 esp 0x1000 -m tunnel
	-E aes-gcm-16 0x000102030405060708090a0b0c0d0e0fcafebabe;
spdadd 10.0.0.0/24 10.0.1.0/24 any -P out ipsec esp/tunnel/192.0.2.1-192.0.2.2/require;
`
	cfg, err := setkey.Parse("ipsec.conf", strings.NewReader(conf))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cfg.Zero()
	sa := cfg.Ops[0].SA
	fmt.Println(sa.Alg, sa.ReplayWindow, sa.Pos)
	fmt.Print(setkey.Format(cfg))

	_, err = setkey.Parse("bad.conf", strings.NewReader("add 192.0.2.1 192.0.2.2 esp 0x1000\n  -E aes-gcm-16 0x0001;"))
	fmt.Println(err)
	// Output:
	// aes-gcm-16-128 64 ipsec.conf:3:1
	// add 192.0.2.1 192.0.2.2 esp 0x1000 -m tunnel -E aes-gcm-16 [redacted 20 bytes];
	// spdadd 10.0.0.0/24[any] 10.0.1.0/24[any] any -P out ipsec esp/tunnel/192.0.2.1-192.0.2.2/require;
	// bad.conf:2:17: encryption key: the key at line 2, column 17: aes-gcm-16 key must be 20, 28 or 36 (key and 4-byte salt) bytes, got 2
}
