// Package monitoring wires a relayfleet fleet into Prometheus and Grafana.
//
// Write turns the stacks recorded in a state directory (the steady fleet's
// and each event's, as fleet up and the event reconciler keep them) into
// Prometheus file_sd target files, one target per relay process (its TCP
// port serves /metrics) and per router, with the labels the rules and the
// dashboard group by: stack, box, group, backend, port, and on an event's
// boxes event and event_end. Beside them it writes the rules
// (relayfleet.rules.yml, fixed, and relayfleet-fleet.rules.yml with the
// fleet's own figures: the sysctl profile's values, each event's
// destroy-by time and box price), a prometheus.yml that scrapes them, and
// the Grafana dashboard with its provisioning files. Every file is
// written atomically: Prometheus re-reads target files on change and never
// sees one half-written.
package monitoring
