// Package schedule owns Leasehold's schedules: a job submission fired on a
// cron expression in an IANA time zone, exactly once per due time however
// many processes fire schedules and whichever of them die.
//
// A schedule is a hash in Redis beside its tenant's due-time index (a
// sorted set of the tenant's schedules, by when they are next due) and an
// index of the tenants with schedules due. Any process may run a
// Scheduler: it reads the tenants' index every 200 ms or so (one
// ZRANGEBYSCORE when nothing is due), takes what is due, an even share
// from each tenant, for a short hold, and fires each with Store.Fire. A
// fire is two idempotent steps in two Redis Cluster slots:
//
//  1. create the job through store.Store.SubmitWithin with an idempotency
//     key made of the tenant, the schedule's name and generation, and the
//     due time: every fire of one due time, by any process, is that one job;
//  2. a compare-and-set moves next_run_at from that due time to the first
//     due time after now, and records the job as the schedule's last.
//
// A process that dies between the two leaves next_run_at at the due time;
// the next scheduler to take it finds the job made and only moves it on.
// Due times missed while nothing ran collapse into one fire: step 2 jumps
// to the first due time after now.
//
// Cron expressions are parsed by github.com/robfig/cron/v3, five fields or
// a descriptor; the time-zone data is compiled in (time/tzdata), so a
// process needs no zoneinfo files. Across a daylight-saving change robfig
// walks wall-clock hours forward in absolute time: a time that does not
// exist on the day clocks spring forward is not fired that day, and a time
// that happens twice on the day clocks fall back is fired twice (see
// docs/architecture.md, Schedules).
package schedule

import _ "time/tzdata" // IANA zones on hosts (and images) without zoneinfo
