package modules_test

import (
	"context"
	"fmt"

	"github.com/keelinit/keel/modules"
)

func Example() {
	// Real modules call modules.Register from init(); WithCatalog keeps the
	// example isolated.
	l := modules.NewLoader(modules.WithLogger(nil), modules.WithCatalog([]modules.Module{
		{Name: "crypto", Version: 2, Kind: modules.KindEngine},
		{Name: "aesni", Version: 1, Kind: modules.KindCryptoProvider,
			Depends: []modules.Dependency{{Name: "crypto", Min: 1, Preferred: 2, Max: 2}}},
		{Name: "ipsec", Version: 1, Kind: modules.KindEngine,
			Depends: []modules.Dependency{{Name: "crypto", Min: 3}}},
	}))
	ctx := context.Background()
	sub := l.Subscribe(false)
	defer sub.Close()

	if err := l.LoadList(ctx, "aesni"); err != nil {
		fmt.Println(err)
	}
	fmt.Println(<-sub.Events())
	fmt.Println(<-sub.Events())
	for _, s := range l.Stat() {
		fmt.Println(s.ID, s.Refs, s.Name, s.Version, s.Kind, s.State, s.DependsOn, s.Holders)
	}
	fmt.Println(l.Load(ctx, "ipsec"))
	fmt.Println(l.Unload(ctx, "crypto"))
	// Output:
	// crypto v2 loaded
	// aesni v1 loaded
	// 1 1 crypto 2 engine loaded [] [aesni]
	// 2 1 aesni 1 crypto-provider loaded [crypto] []
	// modules: load: ipsec requires crypto >= 3, have 2
	// modules: unload: crypto is busy: held by aesni
}
