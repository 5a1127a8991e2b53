package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/mtrl-go/mtrl/examples/internal/atomicfile"
	"github.com/mtrl-go/mtrl/examples/internal/vlm"
	"github.com/mtrl-go/mtrl/tensor/collective"
	"github.com/mtrl-go/mtrl/tprl/loop"
)

// Per-rank optimizer shards of a sharded (ZeRO) checkpoint. Each rank writes the AdamW moments
// it owns (loop.MomentShard: ranges of the flattened parameters) to its own file,
// optimizer_world_size_W_rank_R.safetensors, and rank 0 writes optimizer_shards.json, which
// says how the flattened parameter space was split: the parameters in flattening order and
// each file's ranges. No sharded rank ever holds the whole moments: a rank resuming at any number
// of ranks reads only the files that overlap the ranges it owns now and cuts its moments out
// of them; the values are copied, never recomputed, so the moments after a resume are the
// saved ones bit for bit whatever the two numbers of ranks.
//
// The files go into the checkpoint's temporary directory (Checkpoints.saveDir), each written
// atomically by its rank; rank 0 writes the index, then the manifest, and renames the
// directory into place only after every rank has reported its file written. A checkpoint
// directory therefore exists only with every shard; one that lost a shard later fails its
// manifest and is refused as damaged (training.fallback_checkpoint takes the newest intact one).

const (
	ckptShardIndex  = "optimizer_shards.json"
	shardIndexFmt   = "mtrl-zero-moments"
	shardTensorM    = "exp_avg."
	shardTensorV    = "exp_avg_sq."
	shardFilePrefix = "optimizer_world_size_"
)

// shardFileName is rank's file of a checkpoint written by world ranks (verl's
// optim_world_size_W_rank_R naming).
func shardFileName(rank, world int) string {
	return fmt.Sprintf("%s%d_rank_%d.safetensors", shardFilePrefix, world, rank)
}

// shardParam is one parameter of the flattening order.
type shardParam struct {
	Name string `json:"name"`
	Len  int    `json:"numel"`
}

// shardFile is one rank's file and the flattened ranges [lo, hi) it holds.
type shardFile struct {
	File   string   `json:"file"`
	Rank   int      `json:"rank"`
	Ranges [][2]int `json:"ranges"`
}

// shardIndex is optimizer_shards.json.
type shardIndex struct {
	Format    string       `json:"format"`
	WorldSize int          `json:"world_size"`
	Values    int          `json:"values"` // flattened parameter values
	Params    []shardParam `json:"params"`
	Files     []shardFile  `json:"files"`
}

// shardParamsOf is the flattening order of ps.
func shardParamsOf(ps []loop.Param) []shardParam {
	out := make([]shardParam, len(ps))
	for i, p := range ps {
		out[i] = shardParam{p.Name, p.Value.Len()}
	}
	return out
}

// testShardWrite, when set (tests), runs before a rank writes its shard file; an error fails
// that rank's write.
var testShardWrite func(rank int) error

// saveMomentShards runs on every rank of comm (nil: the only one) at each checkpoint of a
// sharded optimizer. tmp is the checkpoint's temporary directory on rank 0 (ignored on the
// others, who receive it); each rank writes shards, its moments, to its file there, and once
// every rank has reported, rank 0 writes the index. Any rank's failure is every rank's error.
func saveMomentShards(ctx context.Context, comm collective.Comm, tmp string, params []shardParam, shards []loop.MomentShard) error {
	rank, world := 0, 1
	if comm != nil {
		rank, world = comm.Rank(), comm.Size()
	}
	dir := tmp
	if world > 1 {
		if rank != 0 {
			tmp = ""
		}
		got, err := collective.AllGatherBytes(ctx, comm, []byte(tmp))
		if err != nil {
			return err
		}
		dir = string(got[0])
	}
	name := shardFileName(rank, world)
	werr := writeShard(filepath.Join(dir, name), rank, world, shards)
	if errors.Is(werr, os.ErrNotExist) {
		werr = fmt.Errorf("%w (rank 0's checkpoint directory is not here: put training.run_dir on a filesystem every process shares)", werr)
	}
	type report struct {
		Ranges [][2]int
		Err    string
	}
	me := report{}
	for _, s := range shards {
		me.Ranges = append(me.Ranges, [2]int{s.Lo, s.Hi})
	}
	if werr != nil {
		me.Err = werr.Error()
	}
	reports, err := collective.AllGatherValues(ctx, comm, []report{me})
	if err != nil {
		return err
	}
	for r, rep := range reports {
		if rep.Err != "" {
			return fmt.Errorf("optimizer shard of rank %d: %s", r, rep.Err)
		}
	}
	if rank != 0 {
		return nil
	}
	idx := shardIndex{Format: shardIndexFmt, WorldSize: world, Params: params}
	for _, p := range params {
		idx.Values += p.Len
	}
	for r, rep := range reports {
		idx.Files = append(idx.Files, shardFile{File: shardFileName(r, world), Rank: r, Ranges: rep.Ranges})
	}
	js, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return err
	}
	return writeSync(filepath.Join(dir, ckptShardIndex), append(js, '\n'))
}

// writeShard writes rank's moments to path atomically: tensors exp_avg.<lo>-<hi> and
// exp_avg_sq.<lo>-<hi> per range.
func writeShard(path string, rank, world int, shards []loop.MomentShard) error {
	if testShardWrite != nil {
		if err := testShardWrite(rank); err != nil {
			return err
		}
	}
	var ts []NamedTensor
	for _, s := range shards {
		r := fmt.Sprintf("%d-%d", s.Lo, s.Hi)
		ts = append(ts, NamedTensor{Name: shardTensorM + r, Shape: []int{len(s.M)}, Data: s.M},
			NamedTensor{Name: shardTensorV + r, Shape: []int{len(s.V)}, Data: s.V})
	}
	data, err := EncodeSafetensors(ts, map[string]string{"format": shardIndexFmt, "rank": fmt.Sprint(rank), "world_size": fmt.Sprint(world)})
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, data, fileMode)
}

// parseShardIndex reads and checks a checkpoint's index against this run's parameters: the
// same flattening, files named for their ranks, ranges that tile [0, values) exactly.
func parseShardIndex(dir string, data []byte, params []shardParam) (shardIndex, error) {
	var idx shardIndex
	bad := func(format string, a ...any) (shardIndex, error) {
		return shardIndex{}, fmt.Errorf("checkpoint %s: %s: %s", dir, ckptShardIndex, fmt.Sprintf(format, a...))
	}
	if err := json.Unmarshal(data, &idx); err != nil {
		return bad("%v", err)
	}
	if idx.Format != shardIndexFmt {
		return bad("format %q, want %q", idx.Format, shardIndexFmt)
	}
	if !slices.Equal(idx.Params, params) {
		return bad("the moments are of %d other parameters (another model, or LoRA settings?)", len(idx.Params))
	}
	n := 0
	for _, p := range params {
		n += p.Len
	}
	if idx.Values != n || idx.WorldSize < 1 || len(idx.Files) != idx.WorldSize {
		return bad("%d values in %d files of world size %d, want %d values, one file per rank", idx.Values, len(idx.Files), idx.WorldSize, n)
	}
	var all [][2]int
	for r, f := range idx.Files {
		if f.Rank != r || f.File != shardFileName(r, idx.WorldSize) {
			return bad("file %d is %q of rank %d, want %s", r, f.File, f.Rank, shardFileName(r, idx.WorldSize))
		}
		all = append(all, f.Ranges...)
	}
	slices.SortFunc(all, func(a, b [2]int) int { return cmp.Compare(a[0], b[0]) })
	at := 0
	for _, r := range all {
		if r[0] != at || r[1] < r[0] {
			return bad("range [%d, %d) does not continue at value %d: the ranges must tile [0, %d)", r[0], r[1], at, n)
		}
		at = r[1]
	}
	if at != n {
		return bad("the ranges end at value %d of %d", at, n)
	}
	return idx, nil
}

// overlaps reports whether any of ranges meets any of want.
func overlaps(ranges, want [][2]int) bool {
	for _, r := range ranges {
		for _, w := range want {
			if r[0] < w[1] && w[0] < r[1] {
				return true
			}
		}
	}
	return false
}

// shardFilesFor returns the index and the shard files of checkpoint dir that hold values of
// the ranges want, from the index as it is on disk (readCheckpoint then verifies them all).
func shardFilesFor(dir string, params []shardParam, want [][2]int) ([]string, error) {
	data, err := os.ReadFile(filepath.Join(dir, ckptShardIndex))
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	idx, err := parseShardIndex(dir, data, params)
	if err != nil {
		return nil, err
	}
	names := []string{ckptShardIndex}
	for _, f := range idx.Files {
		if overlaps(f.Ranges, want) {
			names = append(names, f.File)
		}
	}
	return names, nil
}

// momentShards decodes the moments of the ranges want from files (read by readCheckpoint
// from dir, the index and shardFilesFor's files among them): every range of every file that
// overlaps want, whole.
func momentShards(dir string, files map[string][]byte, params []shardParam, want [][2]int) ([]loop.MomentShard, error) {
	idx, err := parseShardIndex(dir, files[ckptShardIndex], params)
	if err != nil {
		return nil, err
	}
	var out []loop.MomentShard
	for _, f := range idx.Files {
		if !overlaps(f.Ranges, want) {
			continue
		}
		data, ok := files[f.File]
		if !ok {
			return nil, fmt.Errorf("checkpoint %s: %s was not read (changed while loading?)", dir, f.File)
		}
		path := filepath.Join(dir, f.File)
		ts, err := DecodeSafetensors(data, path)
		if err != nil {
			return nil, err
		}
		if len(ts) != 2*len(f.Ranges) {
			return nil, fmt.Errorf("checkpoint %s: %d tensors, %s lists %d ranges", path, len(ts), ckptShardIndex, len(f.Ranges))
		}
		for _, r := range f.Ranges {
			name := fmt.Sprintf("%d-%d", r[0], r[1])
			m, err := tensorData(ts, path, shardTensorM+name, r[1]-r[0])
			if err != nil {
				return nil, err
			}
			v, err := tensorData(ts, path, shardTensorV+name, r[1]-r[0])
			if err != nil {
				return nil, err
			}
			out = append(out, loop.MomentShard{Lo: r[0], Hi: r[1], M: m, V: v})
		}
	}
	return out, nil
}

// wholeFromShards cuts shards that cover [0, n) into per-parameter moments (an unsharded
// optimizer resuming from a sharded checkpoint).
func wholeFromShards(shards []loop.MomentShard, params []shardParam) (m, v [][]float32, err error) {
	shards = slices.Clone(shards)
	slices.SortFunc(shards, func(a, b loop.MomentShard) int { return cmp.Compare(a.Lo, b.Lo) })
	var fm, fv []float32
	for _, s := range shards {
		if s.Lo != len(fm) {
			return nil, nil, fmt.Errorf("optimizer: moment shard [%d, %d) does not continue at value %d", s.Lo, s.Hi, len(fm))
		}
		fm, fv = append(fm, s.M...), append(fv, s.V...)
	}
	at := 0
	for _, p := range params {
		if at+p.Len > len(fm) {
			return nil, nil, fmt.Errorf("optimizer: %d moment values for more parameters", len(fm))
		}
		m, v = append(m, fm[at:at+p.Len]), append(v, fv[at:at+p.Len])
		at += p.Len
	}
	return m, v, nil
}

// vlmShardParams is the flattening order of the built-in model's parameters ps.
func vlmShardParams(ps []*vlm.Param) []shardParam {
	out := make([]shardParam, len(ps))
	for i, p := range ps {
		out[i] = shardParam{p.Name, p.W.Len()}
	}
	return out
}

// wholeShardFiles returns the index and every shard file of checkpoint dir when its moments
// are per-rank shards, nil when they are optimizer.safetensors (an unsharded reader).
func wholeShardFiles(dir string, ps []*vlm.Param) ([]string, error) {
	if _, err := os.Stat(filepath.Join(dir, ckptShardIndex)); err != nil {
		return nil, nil
	}
	params := vlmShardParams(ps)
	return shardFilesFor(dir, params, allValues(params))
}

// allValues is the whole flattened range of params.
func allValues(params []shardParam) [][2]int {
	n := 0
	for _, p := range params {
		n += p.Len
	}
	return [][2]int{{0, n}}
}
