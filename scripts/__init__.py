"""The paper's tables and figures as tools: run each from the repository root as a module,

    python -m scripts.attn_table shakespeare
    python -m scripts.sweep shakespeare --dry-run

so that the repository's modules (model, train, ...) and the scripts' own (scripts.paper_tables)
import without any sys.path editing.
"""
