package crypto_test

import (
	"context"
	"fmt"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/aesni"
)

// Example binds an AES-128-GCM session (RFC 4106 keying: key || salt) on
// the fastest admitted provider and seals one ESP payload in place.
func Example() {
	ctx := context.Background()
	fw := crypto.New(crypto.Options{Logger: quietLogger()})
	defer fw.Close(ctx)
	if err := fw.Register(ctx, aesni.New()); err != nil {
		fmt.Println(err)
		return
	}
	alg := crypto.Algorithm{Cipher: crypto.CipherAESGCM, KeyBits: 128}
	keys := crypto.SessionParams{Alg: alg, CipherKey: make([]byte, 16+4)}
	b, err := fw.Bind(keys, func(done []*crypto.Request) {
		for _, r := range done {
			fmt.Println("completed:", r.Status)
			crypto.PutRequest(r)
		}
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close(ctx)

	pkt := make([]byte, 64+16) // payload, then room for the ICV
	r := crypto.GetRequest()
	r.Dir = crypto.Encrypt
	r.Data, r.ICV = pkt[:64], pkt[64:]
	r.AAD = []byte{0, 0, 0x43, 0x21, 0, 0, 0, 1} // SPI || sequence number
	r.IV = []byte{0, 0, 0, 0, 0, 0, 0, 1}        // the sequence counter
	fmt.Println("accepted:", b.Submit([]*crypto.Request{r}))
	fmt.Println("provider:", b.Provider())
	// Output:
	// completed: ok
	// accepted: 1
	// provider: aesni
}
