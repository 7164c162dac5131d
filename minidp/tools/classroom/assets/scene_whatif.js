// Scene "whatif": the lessons' formulas, computed in the page for any model and world —
// a what-if panel. Inputs: parameters (or a published model), GPUs, precision, optimizer,
// DDP bucket size, the link's α and β (this recording's, measured, until changed).
// Outputs, each a model with its formula, each beside what this recording measured:
// gradient bytes, bytes each rank sends (ring, server), the α-β time of the gradient
// all-reduce in buckets, and memory per GPU for DDP, ZeRO-1, ZeRO-2 and FSDP.
(() => {
  const { el } = Classroom;
  const { byName, bytes, micros, maxOf } = Draw;
  const LIB = Model.LIB;
  const STAGES = ["ddp", "zero1", "zero2", "fsdp"];
  const vals = { model: "qwen2.5-7b", params: LIB.models["qwen2.5-7b"], gpus: 64, precision: "bf16-mixed",
                 optimizer: "adamw", bucket: 25, alpha: null, beta: null };

  // Every figure the panel shows, from the inputs.
  function compute(v) {
    const [p, g] = LIB.precisions[v.precision], K = Model.optimizerK(v.optimizer, v.precision);
    const P = v.params, W = v.gpus, N = g * P, B = v.bucket * 1048576, L = { alpha: v.alpha, beta: v.beta * 1000 };
    const memory = Object.fromEntries(STAGES.map((s) => {
      const [w, gr, st] = Model.stageBytes(s, P, W, p, g, K);
      return [s, { weights: w, grads: gr, optimizer: st, buckets: Model.bucketBytes(s, P, g) }];
    }));
    return { grad: N, ringBytes: Model.ringBytes(N, W), serverBytes: Model.serverBytes(N, W),
             buckets: Math.ceil(N / B), ringTime: Model.bucketed(L, N, W, B, Model.ringTime),
             serverTime: Model.bucketed(L, N, W, B, Model.serverTime), K, p, g, memory };
  }

  // What this recording measured, for the "measured" lines (null where not recorded).
  function measured(events) {
    const msgs = byName(events, "traffic message").filter((e) => !e.args.header);
    const span = events.find((e) => e.name === "all-reduce: ring");
    const traffic = msgs.length && span ? {
      S: span.args.bytes, W: maxOf(msgs, (e) => e.pid) + 1,
      ring: msgs.filter((e) => e.args.algorithm === "ring" && e.pid === 0).reduce((s, e) => s + e.args.bytes, 0),
      server: msgs.filter((e) => e.args.algorithm === "parameter server" && e.pid === 0).reduce((s, e) => s + e.args.bytes, 0),
      wall: maxOf(events.filter((e) => e.name === "all-reduce: ring"), (e) => e.dur),
    } : null;
    const mem = byName(events, "memory").filter((e) => e.args.point === "after step");
    const ddp = mem.find((e) => e.args.stage === "ddp");
    const memory = ddp ? { P: ddp.args.params / 4, W: new Set(mem.map((e) => e.pid)).size,
      mean: Object.fromEntries(STAGES.map((s) => { const m = mem.filter((e) => e.args.stage === s);
        return [s, m.reduce((t, e) => t + e.args.params + e.args.grads + e.args.optimizer + e.args.buckets, 0) / m.length]; })) } : null;
    return { traffic, memory };
  }

  function field(label, input) { return el("label", {}, el("span", { text: label }), input); }
  let refresh = () => {};  // rebuilds the outputs only: an input keeps its focus while typed in
  function input(key, attrs) {
    const i = el("input", { type: "number", id: `whatif-${key}`, value: vals[key], ...attrs });
    i.oninput = () => {
      if (!(Number(i.value) > 0 || (key === "alpha" && Number(i.value) === 0))) return;  // half typed
      vals[key] = Number(i.value);
      if (key === "params") { vals.model = "custom"; document.getElementById("whatif-model").value = "custom"; }
      refresh();
    };
    return i;
  }
  function select(key, options) {
    const s = el("select", { id: `whatif-${key}` });
    for (const o of options) s.append(el("option", { value: o, text: o }));
    s.value = vals[key];
    s.onchange = () => {
      vals[key] = s.value;
      if (key === "model" && LIB.models[s.value]) {
        vals.params = LIB.models[s.value];
        document.getElementById("whatif-params").value = vals.params;
      }
      refresh();
    };
    return s;
  }
  const out = (key, value, text) => el("b", { "data-out": key, "data-value": value, text });

  Classroom.scene("whatif", (events, ctx) => {
    const L = Model.link(ctx), seen = measured(events);
    if (vals.alpha === null) { vals.alpha = L ? +L.alpha.toFixed(1) : 50; vals.beta = L && L.beta ? +(L.beta / 1000).toFixed(2) : 1; }
    const TEXT = ["All four models at once", "1. Gradient bytes, and what each rank sends per step",
                  "2. The gradient all-reduce's time, α-β model", "3. Memory per GPU, by stage"];
    return {
      count: 4,
      render(k, stage, caption, room) {
        caption.textContent = TEXT[k];
        const ins = el("div", {},
          field("model", select("model", [...Object.keys(LIB.models), "custom"])),
          field("parameters Ψ", input("params", { min: 1, step: "any" })),
          field("GPUs W", input("gpus", { min: 2, step: 1 })),
          field("precision", select("precision", Object.keys(LIB.precisions))),
          field("optimizer", select("optimizer", Object.keys(LIB.moments))),
          field("DDP bucket (MiB)", input("bucket", { min: 0.001, step: "any" })),
          field("latency α (µs)", input("alpha", { min: 0, step: "any" })),
          field("bandwidth β (GB/s)", input("beta", { min: 0.001, step: "any" })),
          el("span", { class: "note", text: L ? "α, β: as measured here, until changed" : "α, β: typed (no link measured in this trace)" }));
        ins.className = "whatif-in";
        const outs = el("div", { id: "whatif-out", class: "whatif-out" });
        refresh = () => outs.replaceChildren(...outputs(k, room));
        refresh();
        stage.append(Draw.main(el("div", { class: "whatif" }, ins, outs)));
        if (L) stage.append(el("p", { class: "formula", text: `α, β measured in this recording: ${Model.describe(L)}` }));
      },
    };

    function outputs(k, room) {
      const c = compute(vals), t = seen.traffic;
      const b1 = el("div", { class: `out${k === 1 ? " current" : ""}` },
        el("div", {}, "gradients N = g·Ψ = ", out("grad", c.grad, bytes(c.grad))),
        el("div", {}, `ring: each rank sends ${Model.FORMULA.ringBytes} = `, out("ring-bytes", c.ringBytes, bytes(c.ringBytes))),
        el("div", {}, `server: rank 0 sends ${Model.FORMULA.serverBytes} = `, out("server-bytes", c.serverBytes, bytes(c.serverBytes)),
           " (and receives as much)"),
        el("div", { class: "formula", text: t ? `measured here (W = ${t.W}, N = ${bytes(t.S)}): ring rank 0 sent ` +
          `${bytes(t.ring)} = ${(t.ring / t.S).toFixed(3)}·N (formula ${(2 * (t.W - 1) / t.W).toFixed(3)}·N); ` +
          `server rank 0 sent ${bytes(t.server)} = ${(t.server / t.S).toFixed(3)}·N (formula ${t.W - 1}·N)` : "" }));
      const b2 = el("div", { class: `out${k === 2 ? " current" : ""}` },
        el("div", {}, "buckets ⌈N/B⌉ = ", out("buckets", c.buckets, String(c.buckets))),
        el("div", {}, "ring: each bucket 2(W−1)·(α + (B/W)/β), in all ", out("ring-time", c.ringTime, micros(c.ringTime)), " (model)"),
        el("div", {}, "server: each bucket 2(W−1)·(α + B/β), in all ", out("server-time", c.serverTime, micros(c.serverTime)), " (model)"),
        el("div", { class: "formula", text: t && L && L.beta ? `measured here: the ring all-reduce of ${bytes(t.S)} on ` +
          `${t.W} ranks took ${micros(t.wall)} (slowest rank, wall clock, minidp's check before it included); the model says ` +
          `${micros(Model.ringTime(L, t.S, t.W))}` : "" }));
      const sc = Draw.scale(maxOf(STAGES, (s) => Object.values(c.memory[s]).reduce((a, x) => a + x, 0)), Math.max(200, room.w * 0.3));
      const b3 = el("div", { class: `out wide${k === 3 ? " current" : ""}` },
        el("div", { class: "formula", text: `p = ${c.p}, g = ${c.g}, K = ${c.K} bytes per parameter (${LIB.layouts[vals.precision]})` }));
      const lw = maxOf(STAGES, (s) => Draw.textWidth(`${LIB.stage_names[s]} ${Model.STAGE_FORMULA[s]}: 000.00 GiB`, Draw.smallPx())) + 16;
      for (const s of STAGES) {
        const m = c.memory[s], tot = m.weights + m.grads + m.optimizer + m.buckets;
        b3.append(el("div", { class: "mrow" }, el("span", { style: `width:${lw}px` }, `${LIB.stage_names[s]} ${Model.STAGE_FORMULA[s]}: `,
          out(`mem-${s}`, tot, bytes(tot))), Draw.bar([{ cls: "part-params", bytes: m.weights }, { cls: "part-grads", bytes: m.grads },
                    { cls: "part-optimizer", bytes: m.optimizer }, { cls: "part-buckets", bytes: m.buckets }], sc)));
      }
      b3.append(Draw.legend([["part-params", "weights"], ["part-grads", "gradients"], ["part-optimizer", "optimizer state"],
                             ["part-buckets", "DDP buckets"]]));
      const mm = seen.memory;
      if (mm) {
        const f = (s) => { const [w, gr, st] = Model.stageBytes(s, mm.P, mm.W, 4, 4, 8); return w + gr + st + Model.bucketBytes(s, mm.P, 4); };
        b3.append(el("div", { class: "formula", text: `measured here (Ψ = ${mm.P}, W = ${mm.W}, fp32 AdamW; mean per rank ` +
          `after the step vs formula): ${STAGES.map((s) => `${s} ${bytes(mm.mean[s])} vs ${bytes(f(s))}`).join(", ")} ` +
          "(the rest: AdamW's step counters, ZeRO-2's padding)" }));
      }
      return [b1, b2, b3];
    }
  });
})();
