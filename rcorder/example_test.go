package rcorder_test

import (
	"fmt"
	"os"
	"testing/fstest"

	"github.com/keelinit/keel/rcorder"
)

func Example() {
	fsys := fstest.MapFS{
		"rc.d/ipsec":     {Data: []byte("#!/bin/sh\n# PROVIDE: ipsec\n# REQUIRE: crypto\n")},
		"rc.d/aesni":     {Data: []byte("# PROVIDE: crypto aesni\n")},
		"rc.d/sshd":      {Data: []byte("# PROVIDE: sshd\n# REQUIRE: ipsec\n# KEYWORD: shutdown\n")},
		"rc.d/firstboot": {Data: []byte("# PROVIDE: firstboot\n# BEFORE: sshd\n# KEYWORD: firstboot\n")},
	}
	scripts, errs := rcorder.Parse(fsys, "rc.d/aesni", "rc.d/firstboot", "rc.d/ipsec", "rc.d/sshd")
	for _, err := range errs {
		fmt.Println("rcorder:", err)
	}
	res := rcorder.Order(scripts, rcorder.Filter{Skip: []string{"firstboot"}})
	res.WriteProblems(os.Stdout, "rcorder: ")
	res.WriteLevels(os.Stdout)
	for i, deps := range res.WaitFor() {
		for _, d := range deps {
			fmt.Printf("%s waits for %s\n", res.Scripts[i].Path, res.Scripts[d].Path)
		}
	}
	fmt.Println("exit", res.ExitCode())
	// Output:
	// rc.d/aesni
	// rc.d/ipsec
	// rc.d/sshd
	// rc.d/ipsec waits for rc.d/aesni
	// rc.d/sshd waits for rc.d/ipsec
	// rc.d/sshd waits for rc.d/firstboot
	// exit 0
}
