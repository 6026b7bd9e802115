package floor

const rusageThread = 1 // RUSAGE_THREAD
