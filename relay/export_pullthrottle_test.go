package relay

// The rates of upstream pulls started by subscribes without a token
// (subscribe.go).
const (
	AnonymousPullBurst      = anonPullBurst
	AnonymousPullsPerSecond = anonPullsPerSecond
	UnknownPullBurst        = unknownPullBurst
	UnknownPullsPerSecond   = unknownPullsPerSecond
)
