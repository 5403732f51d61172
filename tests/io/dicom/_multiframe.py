"""Multi-frame test sources: a single-frame series converted by highdicom, and an Enhanced CT / MR built by hand."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np

#: SOP classes written here
ENHANCED_CT = "1.2.840.10008.5.1.4.1.1.2.1"
ENHANCED_MR = "1.2.840.10008.5.1.4.1.1.4.1"


def legacy_multiframe(files, folder) -> Path:
    """The single-frame slices ``files`` converted to one Legacy Converted Enhanced CT / MR image in ``folder``."""
    import highdicom as hd
    import pydicom

    datasets = [pydicom.dcmread(f) for f in files]
    cls = (hd.legacy.LegacyConvertedEnhancedCTImage if datasets[0].Modality == "CT"
           else hd.legacy.LegacyConvertedEnhancedMRImage)
    image = cls(datasets, series_instance_uid=str(datasets[0].SeriesInstanceUID), series_number=1,
                sop_instance_uid=hd.UID(), instance_number=1)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    image.save_as(folder / "multiframe.dcm", enforce_file_format=True)
    return folder / "multiframe.dcm"


def _item(**attributes):
    from pydicom.dataset import Dataset

    ds = Dataset()
    for key, value in attributes.items():
        setattr(ds, key, value)
    return ds


def enhanced_image(values: np.ndarray, affine: np.ndarray, folder, modality: str = "MR", seed: int | None = 5,
                   per_frame_geometry: bool = False, rescale: bool = True, frame_edit=None) -> tuple[Path, np.ndarray]:
    """An Enhanced CT / MR image of ``values`` ``(columns, rows, slices)`` on the RAS ``affine``, built with pydicom.

    Frames are written in a shuffled order (``seed``; None: slice order), each with its own PlanePositionSequence and
    (``rescale``) its own RescaleSlope / RescaleIntercept (``PixelValueTransformationSequence`` per frame; without,
    an MR has none: identity). ``per_frame_geometry`` puts the orientation and pixel measures in every frame's group
    instead of the shared one. ``frame_edit(i, group)`` may change frame ``i``'s per-frame group (0-based).

    Returns:
        The file, and the real-world values it stores (``(columns, rows, slices)``, what a reader must give back).
    """
    import pydicom
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.uid import ExplicitVRLittleEndian, generate_uid

    lps = np.diag([-1.0, -1.0, 1.0, 1.0]) @ np.asarray(affine, float)
    col, row, step = lps[:3, 0], lps[:3, 1], lps[:3, 2]
    dc, dr = np.linalg.norm(col), np.linalg.norm(row)
    orientation = [round(float(v), 10) for v in np.concatenate([col / dc, row / dr])]
    cols, rows, n = values.shape
    order = np.random.default_rng(seed).permutation(n) if seed is not None else np.arange(n)  # frame i = slice order[i]
    sop_class = ENHANCED_CT if modality == "CT" else ENHANCED_MR
    sop_uid = generate_uid()
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID, meta.MediaStorageSOPInstanceUID = sop_class, sop_uid
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = Dataset()
    ds.file_meta = meta
    ds.SpecificCharacterSet = "ISO_IR 192"
    ds.SOPClassUID, ds.SOPInstanceUID = sop_class, sop_uid
    ds.ImageType = ["ORIGINAL", "PRIMARY", "AXIAL", "NONE"]
    ds.StudyDate, ds.StudyTime, ds.SeriesDate, ds.SeriesTime = "20240101", "120000", "20240101", "120000"
    ds.ContentDate, ds.ContentTime, ds.AcquisitionDateTime = "20240101", "120000", "20240101120000"
    ds.AccessionNumber, ds.Modality, ds.Manufacturer = "A0001", modality, "monai-unc synthetic"
    ds.ManufacturerModelName, ds.DeviceSerialNumber, ds.SoftwareVersions = "test", "1", "1"
    ds.ReferringPhysicianName = ""
    ds.PatientName, ds.PatientID, ds.PatientBirthDate, ds.PatientSex = "Synthetic^Enhanced", "MF001", "19700101", "O"
    ds.StudyInstanceUID, ds.SeriesInstanceUID, ds.FrameOfReferenceUID = generate_uid(), generate_uid(), generate_uid()
    ds.StudyID, ds.SeriesNumber, ds.InstanceNumber = "1", 1, 1
    ds.PositionReferenceIndicator = ""
    ds.PatientPosition = "HFS"
    ds.ContentQualification, ds.BurnedInAnnotation = "RESEARCH", "NO"
    ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
    ds.Rows, ds.Columns, ds.NumberOfFrames = rows, cols, n
    ds.BitsAllocated, ds.BitsStored, ds.HighBit = 16, 16, 15
    ds.PixelRepresentation = 1 if modality == "CT" else 0
    ds.PresentationLUTShape = "IDENTITY"
    ds.LossyImageCompression = "00"
    orientation_item = _item(ImageOrientationPatient=orientation)
    measures_item = _item(PixelSpacing=[round(float(dr), 10), round(float(dc), 10)],
                          SliceThickness=round(float(abs(np.linalg.det(lps[:3, :3])) / (dc * dr)), 10))
    shared = Dataset()
    if not per_frame_geometry:
        shared.PlaneOrientationSequence = [orientation_item]
        shared.PixelMeasuresSequence = [measures_item]
    ds.SharedFunctionalGroupsSequence = [shared]
    stored_values = np.zeros((n, rows, cols), dtype=np.int16 if modality == "CT" else np.uint16)
    real = np.zeros(values.shape)
    groups = []
    for i, k in enumerate(order):
        group = Dataset()
        position = lps[:3, 3] + k * step
        group.PlanePositionSequence = [_item(ImagePositionPatient=[round(float(v), 8) for v in position])]
        group.FrameContentSequence = [_item(StackID="1", InStackPositionNumber=int(k) + 1,
                                            FrameAcquisitionNumber=1)]
        if per_frame_geometry:
            group.PlaneOrientationSequence = [copy.deepcopy(orientation_item)]
            group.PixelMeasuresSequence = [copy.deepcopy(measures_item)]
        slope, intercept = (1.0, 0.0)
        if rescale:
            slope, intercept = ((0.5 + 0.25 * (i % 3), -1024.0 + 8 * i) if modality == "CT"
                                else (1.0 + (i % 2), -3.0 * i))
            group.PixelValueTransformationSequence = [_item(RescaleSlope=slope, RescaleIntercept=intercept,
                                                            RescaleType="HU" if modality == "CT" else "US")]
        plane = values[:, :, k].T
        limits = (-32768, 32767) if modality == "CT" else (0, 65535)
        stored = np.clip(np.round((plane - intercept) / slope), *limits)
        stored_values[i] = stored
        real[:, :, k] = (stored * slope + intercept).T
        if frame_edit is not None:
            frame_edit(i, group)
        groups.append(group)
    ds.PerFrameFunctionalGroupsSequence = groups
    ds.PixelData = stored_values.tobytes()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "enhanced.dcm"
    pydicom.dcmwrite(path, ds, enforce_file_format=True)
    return path, real
