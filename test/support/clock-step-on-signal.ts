// Preload for child processes whose wall clock a test steps: node --import tsx --import ./test/support/clock-step-on-signal.ts <entry>
// Each SIGUSR2 the process receives steps Date.now by CLOCK_STEP_MS (negative: back), as NTP or a resumed VM steps
// the wall clock; performance.now and timers are left alone, as they are then.
const realNow = Date.now.bind(Date);
const stepMs = Number(process.env.CLOCK_STEP_MS ?? '-30000');
let offsetMs = 0;
Date.now = () => realNow() + offsetMs;
process.on('SIGUSR2', () => {
  offsetMs += stepMs;
});
