// Package labtest holds relayfleet's lab system tests (build tag lab;
// TestMonitorLab also needs monitor, TestCalibrateLab calib): they build
// bin/fleet and bin/relay once and run them as processes against fleets
// of lab boxes (systemd-nspawn) on labs of their own, as an operator
// would: converge, rollout cut mid-way, fleet loadtest, the events timer
// under systemd, signals, and the fault tests (make lab-faults). Run them
// with make lab-test (root and the Pulumi CLI are needed).
package labtest
