package padlock

import (
	"context"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/padlock-go/padlock/driver"
)

// goRedisPubSub is the driver.PubSub of a go-redis *redis.PubSub. go-redis
// dials it at its first subscribe, to the node of the first channel's slot
// on a Cluster, and dials again by itself after an error; padlock closes
// it then (see driver.PubSub), which costs nothing more.
type goRedisPubSub struct{ ps *redis.PubSub }

// PubSub returns a *redis.PubSub subscribed to nothing yet: go-redis picks
// its node by the channels it subscribes first, key's.
func (g *goRedis) PubSub(ctx context.Context, _ string) (driver.PubSub, error) {
	return &goRedisPubSub{ps: g.rdb.Subscribe(ctx)}, nil
}

func (p *goRedisPubSub) Subscribe(ctx context.Context, sharded bool, channels ...string) error {
	if sharded {
		return goRedisError(p.ps.SSubscribe(ctx, channels...))
	}
	return goRedisError(p.ps.Subscribe(ctx, channels...))
}

// Receive returns go-redis's next message, confirmation of a subscribe or
// pong as package driver has them, and skips anything else.
func (p *goRedisPubSub) Receive(ctx context.Context, timeout time.Duration) (any, error) {
	for {
		msg, err := p.ps.ReceiveTimeout(ctx, timeout)
		if err != nil {
			return nil, goRedisError(err)
		}
		switch m := msg.(type) {
		case *redis.Message:
			return &driver.Message{Channel: m.Channel, Payload: m.Payload}, nil
		case *redis.Subscription:
			if !strings.HasSuffix(m.Kind, "unsubscribe") {
				return &driver.Subscription{Channel: m.Channel}, nil
			}
		case *redis.Pong:
			return &driver.Pong{}, nil
		}
	}
}

func (p *goRedisPubSub) Ping(ctx context.Context) error { return goRedisError(p.ps.Ping(ctx)) }

func (p *goRedisPubSub) Close() error { return goRedisError(p.ps.Close()) }

// Unsubscribe makes goRedisPubSub a driver.Unsubscriber.
func (p *goRedisPubSub) Unsubscribe(ctx context.Context, sharded bool, channels ...string) error {
	var err error
	if sharded {
		err = p.ps.SUnsubscribe(ctx, channels...)
	} else {
		err = p.ps.Unsubscribe(ctx, channels...)
	}
	for err == nil {
		var msg any
		if msg, err = p.ps.Receive(ctx); err == nil {
			if s, ok := msg.(*redis.Subscription); ok && strings.HasSuffix(s.Kind, "unsubscribe") {
				return nil
			}
		}
	}
	return goRedisError(err)
}
