package main

import (
	"fmt"
	"math"
)

// Schedule is a learning-rate schedule after the linear warm-up (EasyR1 / transformers names).
type Schedule int

const (
	Constant Schedule = iota // warm-up then constant (constant_with_warmup is the same)
	Cosine                   // warm-up then half a cosine down to min_lr_ratio*lr
	Linear                   // warm-up then a straight line down to min_lr_ratio*lr
)

// ParseSchedule parses lr_scheduler_type.
func ParseSchedule(s string) (Schedule, error) {
	switch s {
	case "constant", "constant_with_warmup", "":
		return Constant, nil
	case "cosine":
		return Cosine, nil
	case "linear":
		return Linear, nil
	}
	return 0, fmt.Errorf("unknown schedule %q (want constant, constant_with_warmup, cosine or linear)", s)
}

// LRAt is the learning rate of optimizer step `step` (0-based) of `total`: linear warm-up from
// lr/warmup over warmup steps (as torch's LambdaLR with (step+1)/warmup), then the schedule.
func (o OptimConfig) LRAt(step, total int) float64 {
	sched, _ := ParseSchedule(o.LRSchedulerType) // validated with the config
	warm := o.WarmupSteps
	if warm == 0 && o.LRWarmupRatio > 0 {
		warm = int(math.Ceil(o.LRWarmupRatio * float64(total)))
	}
	if step < warm {
		return o.LR * float64(step+1) / float64(warm)
	}
	if sched == Constant || total <= warm {
		return o.LR
	}
	progress := math.Min(1, float64(step-warm)/float64(max(1, total-warm)))
	floor := o.MinLRRatio
	var f float64
	switch sched {
	case Cosine:
		f = floor + (1-floor)*0.5*(1+math.Cos(math.Pi*progress))
	case Linear:
		f = floor + (1-floor)*(1-progress)
	}
	return o.LR * f
}
