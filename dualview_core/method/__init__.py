"""The paper's method, and nothing else: what a newcomer reads to see what dual-view training is.

    prompting       the polarity-reversal prompt for one (seed, target) and the prompt's version
    parsing         an LLM reply -> an instruction I_new, or a named rejection (the guards)
    dual_view       the reversed view: q, I_new, positive N*, instruction negatives P+ and N_1..N_k
    training_rows   seeds and dual views as rows to train on; the corruption control's swap
    mixtures        Ins-orig, Ins-DV, All-orig, All-DV and the ratio sweep, size-matched
    negatives       K hard negatives per row, instruction negatives first; a batch's candidate block
    texts           query ⊕ instruction, and a document, as the encoder reads them
    loss            InfoNCE over each query's candidates (τ = 0.02 in the paper)
    metrics         p-MRR and Score as FollowIR defines them, and the pytrec_eval measures

Imports nothing from the project but `contracts`, `keys` and `config`: no storage, engine or scale code.
"""
