package main

import "github.com/mtrl-go/mtrl/tprl/loop"

// Schedule is o's learning-rate schedule (lr_scheduler_type, validated with the config).
func (o OptimConfig) Schedule() loop.Schedule {
	kind, _ := loop.ParseScheduleKind(o.LRSchedulerType)
	return loop.Schedule{LR: o.LR, WarmupSteps: o.WarmupSteps, WarmupRatio: o.LRWarmupRatio, Kind: kind, MinLRRatio: o.MinLRRatio}
}
