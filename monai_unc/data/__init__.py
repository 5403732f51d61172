"""Example data: the real MNI152 tissue task (nilearn, offline) and a synthetic 3D toy set with raters and shifts."""

from .cohorts import (
    DEMO_CALIBRATION_SHIFTS,
    DEMO_NEW_SHIFTS,
    DEMO_RECORD,
    DEMO_SHIFTS,
    make_demo_cohort,
    write_toy_cohort,
)
from .mni152 import TISSUE_CLASSES, hemisphere_masks, load_mni152_tissue, tissue_ambiguity
from .model import (
    EXAMPLE_NETWORK,
    build_example_network,
    check_trained_network_path,
    example_weights_path,
    example_weights_record,
    load_example_model,
)
from .perturbations import (
    FIXED_PERTURBATIONS,
    MAX_SEVERITY,
    PERTURBATIONS,
    fixed_perturbation,
    make_mni152_cohort,
    perturb,
)
from .ssn_training import SSN_TOY_NETWORK, build_ssn_network, train_ssn
from .synthetic import SHIFTS, make_toy_case, make_toy_dataset

__all__ = [
    "SSN_TOY_NETWORK",
    "build_ssn_network",
    "train_ssn",
    "DEMO_SHIFTS",
    "DEMO_CALIBRATION_SHIFTS",
    "DEMO_NEW_SHIFTS",
    "DEMO_RECORD",
    "make_demo_cohort",
    "write_toy_cohort",
    "FIXED_PERTURBATIONS",
    "fixed_perturbation",
    "MAX_SEVERITY",
    "PERTURBATIONS",
    "make_mni152_cohort",
    "perturb",
    "EXAMPLE_NETWORK",
    "SHIFTS",
    "TISSUE_CLASSES",
    "build_example_network",
    "check_trained_network_path",
    "example_weights_path",
    "example_weights_record",
    "hemisphere_masks",
    "load_example_model",
    "load_mni152_tissue",
    "make_toy_case",
    "make_toy_dataset",
    "tissue_ambiguity",
]
