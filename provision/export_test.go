package provision

// StatsUpstream is statsUpstream, for the external tests.
var StatsUpstream = statsUpstream
