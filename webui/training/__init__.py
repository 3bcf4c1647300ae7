"""LoRA training: settings (one table), datasets to tokenized examples, and a plain PyTorch loop over peft.

The CLI (`python launch.py train`, cli.py) drives it today and the Training tab will: :func:`trainer.train` takes
a progress callback and a stop flag, saves checkpoints, and resumes from one.
"""
