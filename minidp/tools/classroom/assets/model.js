// The models the lessons teach, as the page computes them. Every modelled number on the
// page comes from here and is labelled "model" with its formula; α and β are the ones
// measured in this recording (rec_link.py: lesson 6's ping-pong and fit), shown with them.
//   lesson 6: one message of n bytes takes α + n/β
//   lesson 7: the parameter server's rank 0 receives and sends (W-1)·N bytes
//   lesson 8: a ring rank sends 2(W-1)/W·N bytes in 2(W-1) steps of N/W
//   lesson 18 / minidp.tools.planner.plan: model-state bytes per GPU for each ZeRO stage
const Model = (() => {
  const LIB = JSON.parse(document.getElementById("library").textContent);

  // {alpha (µs), beta (bytes/µs), samples, between} from the trace, or null.
  function link(ctx) {
    const e = ctx && ctx.link;
    if (!e || !e.args || typeof e.args.alpha_us !== "number") return null;
    return { alpha: e.args.alpha_us, beta: e.args.beta_bytes_per_us, samples: e.args.samples,
             between: e.args.between, cpus: e.args.cpus };
  }
  const message = (L, n) => L.alpha + n / L.beta;
  const ringBytes = (N, W) => (2 * (W - 1) / W) * N;
  const serverBytes = (N, W) => (W - 1) * N;
  const ringTime = (L, N, W) => 2 * (W - 1) * message(L, N / W);
  const serverTime = (L, N, W) => 2 * (W - 1) * message(L, N);
  const gatherTime = (L, N, W) => (W - 1) * message(L, N / W);  // all-gather or reduce-scatter
  // Gradients of N bytes in buckets of B: ceil(N/B) ring all-reduces, one after the other.
  function bucketed(L, N, W, B, one = ringTime) {
    const full = Math.floor(N / B), rest = N - full * B;
    return full * one(L, B, W) + (rest > 0 ? one(L, rest, W) : 0);
  }
  // Compute (not a lesson's measurement: the usual estimate, Kaplan et al. 2020): training
  // does about 6 FLOPs per parameter per token, 2 in forward and 4 in backward; F is the
  // FLOP/s a GPU sustains (peak x utilisation). Times in µs.
  const forwardTime = (P, T, F) => (2 * P * T) / F * 1e6;
  const backwardTime = (P, T, F) => (4 * P * T) / F * 1e6;
  // DDP's step with overlap: every bucket but the last is all-reduced while backward still
  // computes; the last one starts when backward ends. (A first bucket waits for its
  // gradients too: this is the best case.)
  function ddpStep(L, N, W, B, fwd, bwd) {
    const all = bucketed(L, N, W, B), rest = N % B, last = ringTime(L, rest > 0 ? rest : Math.min(B, N), W);
    return fwd + Math.max(bwd, all - last) + last;
  }
  // HSDP on R = W/S nodes of S GPUs (lesson 37): in each node, the parameters are
  // all-gathered twice (forward, backward) and the gradients reduce-scattered, at the node's
  // β; across nodes only each shard's gradient (N/S) is all-reduced, at the network's. FSDP
  // over all W GPUs runs its three rings across nodes: the network's β is their bottleneck.
  function hsdp(Ln, Lx, Pb, N, W, S) {
    const R = W / S;
    return { inside: 2 * gatherTime(Ln, Pb, S) + gatherTime(Ln, N, S), across: R > 1 ? ringTime(Lx, N / S, R) : 0,
             acrossBytes: R > 1 ? ringBytes(N / S, R) : 0 };
  }
  function fsdpAcross(Lx, Pb, N, W) {
    return { time: 2 * gatherTime(Lx, Pb, W) + gatherTime(Lx, N, W), bytes: ((2 * Pb + N) * (W - 1)) / W };
  }
  const FORMULA = {
    message: "t(n) = α + n/β",
    ring: "2(W−1)·(α + (N/W)/β)",
    server: "2(W−1)·(α + N/β)",
    gather: "(W−1)·(α + (N/W)/β)",
    ringBytes: "2(W−1)/W·N",
    serverBytes: "(W−1)·N",
  };
  function describe(L) {
    if (!L) return "α, β: not measured in this trace";
    const beta = L.beta ? `β = ${(L.beta / 1000).toFixed(2)} GB/s` : "β not measurable in this run";
    return `α = ${L.alpha.toFixed(1)} µs, ${beta} (ping-pong between ${L.between}, best of ` +
      `several round trips; lesson 6's fit)`;
  }

  // Why a measured collective here takes many times its α-β model: said next to both.
  function gap(L, modelled, measured, world) {
    if (!L || !(modelled > 0) || !(measured > 0)) return Classroom.el("p", { class: "note" });
    const cores = L.cpus ? ` on this machine's ${L.cpus} CPU cores` : "";
    return Classroom.el("p", { class: "note gap", "data-ratio": (measured / modelled).toFixed(2),
      text: `Why measured is ${(measured / modelled).toFixed(1)}× the model: α and β come from two ` +
        `ranks bouncing one message with nothing else running. Here all ${world} rank processes run ` +
        `at once${cores} (gloo over loopback TCP): each message also pays Python's and gloo's per-call ` +
        "cost and waits for its process to be scheduled — overhead a two-rank ping-pong does not see — " +
        "and loopback \"bandwidth\" is a memory copy on a shared CPU, so β changes from run to run. What " +
        "carries over to a real network is the model's shape (how many messages, of what size); α and " +
        "β are then the links'." });
  }

  // minidp.tools.planner.plan: (weights, gradients, optimizer state) bytes on one GPU.
  function stageBytes(stage, P, W, p, g, k) {
    const weights = p * P, grads = g * P, st = k * P;
    if (stage === "ddp") return [weights, grads, st];
    if (stage === "zero1") return [weights, grads, st / W];
    if (stage === "zero2") return [weights, grads / W, st / W];
    if (stage === "fsdp") return [weights / W, grads / W, st / W];
    throw new Error(`unknown stage ${stage}`);
  }
  // DDP's flat gradient buckets: DDP and ZeRO-1 (which runs on DDP) keep a second copy.
  const bucketBytes = (stage, P, g) => (stage === "ddp" || stage === "zero1" ? g * P : 0);
  function optimizerK(optimizer, precision) {
    const [, , master, moment] = LIB.precisions[precision];
    return master + LIB.moments[optimizer] * moment;
  }
  const STAGE_FORMULA = { ddp: "(p+g+K)Ψ + gΨ buckets", zero1: "(p+g)Ψ + KΨ/W + gΨ buckets",
                          zero2: "pΨ + (g+K)Ψ/W", fsdp: "(p+g+K)Ψ/W" };

  return { LIB, link, message, ringBytes, serverBytes, ringTime, serverTime, gatherTime,
           bucketed, forwardTime, backwardTime, ddpStep, hsdp, fsdpAcross, FORMULA, describe, gap, stageBytes, bucketBytes, optimizerK, STAGE_FORMULA };
})();
