package router

// RepollsInFlight is how many avoid= re-polls have started and not yet
// landed (their answer applied): a test waits for 0 instead of sleeping.
func (r *Router) RepollsInFlight() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, s := range r.relays {
		if s.repolling {
			n++
		}
	}
	return n
}
