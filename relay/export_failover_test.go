package relay

// Crash ends the relay the way SIGKILL does, as far as its peers can
// tell (crash, reset_test.go): the failover tests kill an origin.
func (r *Relay) Crash() { r.crash() }
