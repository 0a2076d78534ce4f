package padlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/padlock-go/padlock"
)

// Two instances campaign to lead the scheduler; the first leads, the
// other waits in line. The leader's term goes with its writes (storage
// rejects a lower term than one it has seen). When the leader resigns,
// its Context ends and the next candidate leads at once, in a higher
// term.
func ExampleClient_Campaign() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	web1, web2 := padlock.New(rdb), padlock.New(rdb)
	defer web1.Close()
	defer web2.Close()

	lead1, err := web1.Campaign(ctx, "lead:scheduler", 10*time.Second, "web-1")
	if err != nil {
		fmt.Println("web-1:", err)
		return
	}
	fmt.Println(lead1.Value(), "leads in term", lead1.Term())

	next := make(chan *padlock.Leadership)
	go func() {
		lead2, _ := web2.Campaign(ctx, "lead:scheduler", 10*time.Second, "web-2") // waits
		next <- lead2
	}()
	info, _ := web2.Leader(ctx, "lead:scheduler")
	fmt.Println("web-2 sees", info.Value, "in term", info.Term)

	_ = lead1.Resign(ctx)
	<-lead1.Context().Done() // the work done as web-1's leader stops
	fmt.Println("web-1 resigned:", errors.Is(context.Cause(lead1.Context()), padlock.ErrNotHeld))
	lead2 := <-next
	fmt.Println(lead2.Value(), "leads in term", lead2.Term())

	_ = lead2.Resign(ctx)
	_, err = web1.Leader(ctx, "lead:scheduler")
	fmt.Println("after web-2 resigned:", errors.Is(err, padlock.ErrNoLeader))
	// Output:
	// web-1 leads in term 1
	// web-2 sees web-1 in term 1
	// web-1 resigned: true
	// web-2 leads in term 2
	// after web-2 resigned: true
}

// A dashboard follows who leads the scheduler: Observe sends the state
// now (nobody leads), then each change: a leader, a new value it
// proclaims, nobody again when it resigns. A reader that falls behind
// gets the newest state; this one reads each before the next change.
func ExampleClient_Observe() {
	rdb, stop := exampleRedis()
	defer stop()
	web1, dashboard := padlock.New(rdb), padlock.New(rdb)
	defer web1.Close()
	defer dashboard.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	leaders := dashboard.Observe(ctx, "lead:scheduler")
	show := func() {
		if info := <-leaders; info.Term == 0 {
			fmt.Println("nobody leads")
		} else {
			fmt.Printf("%s leads in term %d\n", info.Value, info.Term)
		}
	}
	show()

	lead, err := web1.Campaign(ctx, "lead:scheduler", 10*time.Second, "web-1")
	if err != nil {
		fmt.Println("web-1:", err)
		return
	}
	show()
	_ = lead.Proclaim(ctx, "web-1 (draining)")
	show()
	_ = lead.Resign(ctx)
	show()

	cancel() // the dashboard closes: Observe closes its channel
	for range leaders {
	}
	// Output:
	// nobody leads
	// web-1 leads in term 1
	// web-1 (draining) leads in term 1
	// nobody leads
}
