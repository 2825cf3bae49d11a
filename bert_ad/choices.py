"""The values each choice flag accepts, named once and without TensorFlow.

The command line lists them (--helpfull, a bad value refused before TensorFlow
is imported: bert_ad/cli/flag_groups.py) and the modules that act on them
(model, parallel, distributed, serving) import them from here, so the flag and
the code that runs it cannot disagree.
"""

# Activation precision of the encoder (bert_ad/model/precision.py).
PRECISIONS = ("fp32", "fp16", "bf16")
# How a row becomes one vector for a classifier head (bert_ad/model/modeling.py).
POOLINGS = ("cls", "mean")
# A long text's logits from its windows' (bert_ad/model/windows.py).
WINDOW_POOLINGS = ("mean", "max", "attention")
# Where the variables live and how tower gradients are combined (bert_ad/parallel/towers.py).
PARAMETER_SERVER = "parameter_server"
REPLICATED = "replicated"
VARIABLE_UPDATES = (PARAMETER_SERVER, REPLICATED)
# bert_ad/parallel/optimization.py.
OPTIMIZERS = ("adamw", "adam", "radam", "lamb")
# How --learning_rate follows the global batch (bert_ad/parallel/learning_rate.py).
LR_SCALING_MODES = ("none", "linear", "sqrt")
# The cross-worker all-reduce (bert_ad/distributed/cluster.py).
COLLECTIVE_IMPLEMENTATIONS = ("auto", "ring", "nccl")
# Which of the teacher's layers a `bert-ad distill --student_layers=K` student starts
# from and is matched against (bert_ad/model/student.py).
STUDENT_LAYER_SELECTIONS = ("spread", "first")
# The fine-tuned task a distilled teacher was trained by (bert_ad/cli/distill.py).
TEACHER_TASKS = ("classifier", "ner")
