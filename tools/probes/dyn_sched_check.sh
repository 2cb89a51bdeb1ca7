#!/usr/bin/env bash
# The dynamic tile scheduler's GPU checks (session 12): fa3-gen check under each dyn_sched knob
# value (2: a counter at every launch, 0: the kernel before it, 3: the static order through the
# hand-over) at every head dim, dtype and mask, then racecheck and synccheck under dyn_sched=2
# (tools/probes/knob_check.sh does the work). Run on the device after tools/gpu-bundle.sh
# (carry .gpu): bash tools/probes/dyn_sched_check.sh
exec bash "$(dirname "$0")/knob_check.sh" dyn_sched=2 dyn_sched=0 dyn_sched=3
