package main

import (
	"bufio"
	"log"
	"net"
	"strings"
	"sync"
)

// monitor counts the commands Redis runs, by the address of the client
// that sent them, from its call until stop is called; a script's commands
// count for the client that ran the script (MONITOR shows them just after
// it). It watches through MONITOR, on a connection of its own.
func monitor(addr string) (stop func() map[string]int) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		log.Fatalf("monitor: %v", err)
	}
	r := bufio.NewReader(conn)
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		log.Fatalf("monitor: %v", err)
	}
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
		log.Fatalf("monitor: %q, %v", line, err)
	}
	counts := map[string]int{}
	var wg sync.WaitGroup
	wg.Go(func() {
		last := ""
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return // closed by stop
			}
			// +1796607913.820415 [0 127.0.0.1:39048] "PING"
			_, rest, ok := strings.Cut(line, "[")
			who, _, ok2 := strings.Cut(rest, "]")
			f := strings.Fields(who)
			if !ok || !ok2 || len(f) != 2 {
				continue
			}
			if f[1] != "lua" {
				last = f[1]
			}
			counts[last]++
		}
	})
	return func() map[string]int {
		_ = conn.Close()
		wg.Wait()
		return counts
	}
}
