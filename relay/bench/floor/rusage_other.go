//go:build !linux

package floor

const rusageThread = 0 // RUSAGE_SELF: the whole process, a looser figure
