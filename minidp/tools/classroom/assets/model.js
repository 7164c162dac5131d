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
             between: e.args.between };
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
           bucketed, FORMULA, describe, stageBytes, bucketBytes, optimizerK, STAGE_FORMULA };
})();
