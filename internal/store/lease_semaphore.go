package store

import (
	"context"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/store/scripts"
)

var (
	ticketPollScript  = scripts.Load("semaphore_poll.lua", "fence.lua", "budget.lua")
	ticketLeaveScript = scripts.Load("semaphore_leave.lua")
)

// TicketPoll is one poll of a waiter's ticket in the line of a semaphore
// key: join (the first time), heartbeat, go to the back of the line when
// Back, and take a slot if Grant, the ticket heads the line and the key
// has room.
type TicketPoll struct {
	Key, Ticket, Holder string
	// TicketTTL is how long the ticket stays in line without a poll;
	// LeaseTTL how long the slot it is granted lives unless renewed.
	TicketTTL, LeaseTTL time.Duration
	Limit               int // -1: none
	Budget              LeaseBudget
	Tokens              int64 // the holder's estimate, for the budget's tpm
	Join, Grant, Back   bool
}

// TicketStatus is what a poll found. A ticket neither Pending nor granted
// (Token 0) has ended: it expired, or a leave raced ahead of the poll.
type TicketStatus struct {
	Pending bool
	// Token is the granted slot's fencing token.
	Token fencing.Token
	// More says, for a granted ticket, that others wait and slots are
	// free: they should be woken.
	More bool
	// Ready says the pending ticket heads the line and the key has room,
	// but it was not granted: it did not ask to be (Grant false).
	Ready bool
}

// PollTicket runs p (see TicketPoll).
func (s *Store) PollTicket(ctx context.Context, p TicketPoll) (TicketStatus, error) {
	ks, key := s.keys, p.Key
	rpm, tpm, adaptive := p.Budget.args()
	res, err := ticketPollScript.Run(ctx, s.rdb,
		[]string{ks.SemQueue(key), ks.SemTickets(key), ks.SemSeq(key), ks.SemTicket(key, p.Ticket), ks.LeaseSet(key), ks.LeaseFence(key),
			ks.LeaseTurn(key), ks.LeaseWaiting(key), ks.LeaseWindow(key), ks.LeaseSpent(key), ks.LeaseThrottle(key), ks.LeaseAdapt(key)},
		p.Ticket, p.TicketTTL.Milliseconds(), p.Join, p.Holder, p.LeaseTTL.Milliseconds(), p.Limit,
		rpm, tpm, adaptive, min(max(p.Tokens, 0), maxLeaseTokens), p.Grant, p.Back).Int64Slice()
	if err == nil && (len(res) == 0 || res[0] == 0 && len(res) != 3 || res[0] == 1 && len(res) != 4) {
		err = fmt.Errorf("reply %v", res)
	}
	if err != nil {
		return TicketStatus{}, fmt.Errorf("store: poll ticket on %q: %w", key, err)
	}
	switch res[0] {
	case 0:
		return TicketStatus{Pending: true, Ready: res[1] == 0 && res[2] == 0}, nil
	case 1:
		return TicketStatus{Token: fencing.Token(res[1]), More: res[3] == 1}, nil
	}
	return TicketStatus{}, nil
}

// TicketLeave takes a ticket out of key's line.
type TicketLeave struct {
	Key, Ticket string
	// TimedOut ends the ticket TIMED_OUT, else CANCELLED: either stops a
	// poll or join that was sent before and arrives after.
	TimedOut  bool
	TicketTTL time.Duration
}

// LeaveLine runs l and returns the state the ticket was in: "PENDING" (now
// left), "GRANTED" (the caller holds a slot it must release), "CANCELLED"
// or "TIMED_OUT" (left before), or "" (never joined, or expired and
// reaped). It is idempotent.
func (s *Store) LeaveLine(ctx context.Context, l TicketLeave) (was string, err error) {
	ks, key := s.keys, l.Key
	state := "CANCELLED"
	if l.TimedOut {
		state = "TIMED_OUT"
	}
	was, err = ticketLeaveScript.Run(ctx, s.rdb, []string{ks.SemQueue(key), ks.SemTickets(key), ks.SemTicket(key, l.Ticket)},
		l.Ticket, state, l.TicketTTL.Milliseconds()).Text()
	if err != nil {
		return "", fmt.Errorf("store: leave line of %q: %w", key, err)
	}
	return was, nil
}

// LineWakeSubject is the NATS subject on which key's line is told that a
// slot may be free.
func (s *Store) LineWakeSubject(key string) string { return s.keys.SemWake(key) }
