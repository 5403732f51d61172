// monai-unc: the interactive viewer of the report and triage pages (monai_unc/report/viewer.py writes its data).
// Every <div class="mu-viewer"> holds a canvas, its controls and the id of a <script type="application/json">
// block with the case's volumes (gzipped NIfTI as base64: image, prediction, uncertainty). NiiVue (the global
// `niivue` of niivue.umd.js, loaded before this file) draws them; nothing is fetched from the network. When every
// viewer has loaded, <body data-viewer-ready="N"> says so (and data-viewer-rect where the first canvas is); a
// viewer that fails shows its error and sets data-viewer-error on the body (tests read these). The legends under the
// controls are HTML (titles, units and class names written by viewer.py); this file paints their colour ramps from
// NiiVue's own colormaps, so they match the overlays. The prediction is drawn with a label lookup table (one colour
// per class, background transparent) and the uncertainty is transparent below its threshold (the slider).
// Lesions: rows of a table with data-lesion-case and data-lesion-mm (the report's lesion list) become links to
// "#lesion=<case>:<x>,<y>,<z>" (world coordinates in mm) when the page has that case's viewer; such a fragment, on
// load or when it changes, centres the case's viewer on the point and scrolls to it (<body data-viewer-centre>
// then names the case and the voxel of the viewer's volume the crosshair is on, in the case's own grid).
// Display convention: data.convention "radiological" starts NiiVue in its radiological mode (isRadiologicalConvention:
// the patient's right on the screen's left in the axial and coronal planes); "neurological" (the default) the patient's
// left on the left. The box's data-convention says which one NiiVue holds (tests read it).
(function () {
  "use strict";
  var SLICE_TYPES = { multiplanar: 3, axial: 0, coronal: 1, sagittal: 2, render: 4 };

  function byId(id) { return document.getElementById(id); }

  // a number as viewer.py writes it (_fmt): whole from 1000 on, else three significant digits without trailing zeros
  function fmt(x) {
    if (Math.abs(x) >= 1000) { return x.toFixed(0); }
    return String(Number(x.toPrecision(3)));
  }

  function dropPending(box) {  // the static "has not started" message of viewer.py
    var pending = box.querySelector("[data-pending]");
    if (pending) { pending.parentNode.removeChild(pending); }
  }

  function showError(box, err) {
    dropPending(box);
    var msg = document.createElement("p");
    msg.className = "mu-viewer-error";
    msg.textContent = "The interactive viewer could not start (" + (err && err.message ? err.message : err) +
      "); the slices above show the same case.";
    box.appendChild(msg);
    document.body.setAttribute("data-viewer-error", String(err && err.message ? err.message : err));
  }

  function start(box) {
    var data = JSON.parse(byId(box.getAttribute("data-volumes")).textContent);
    var canvas = box.querySelector("canvas.mu-view");
    // NiiVue draws its loading text in a bitmap font of printable ASCII only: a case id in another script was drawn
    // with its letters left out (another case's name) and a console warning per letter (hostile review 59)
    var loading = /^[\x20-\x7e]*$/.test(data.case) ? "loading " + data.case : "loading";
    var nv = new niivue.Niivue({  // the multiplanar view: a 2 x 2 grid, the 3D render always the fourth tile
      backColor: [0, 0, 0, 1], show3Dcrosshair: true, multiplanarShowRender: niivue.SHOW_RENDER.ALWAYS,
      multiplanarLayout: 2, isColorbar: false, crosshairWidth: 1, loadingText: loading,
      isRadiologicalConvention: data.convention === "radiological"
    });
    box.setAttribute("data-convention", nv.getRadiologicalConvention() ? "radiological" : "neurological");
    nv.attachToCanvas(canvas);
    var images = data.volumes.map(function (v) {
      return niivue.NVImage.loadFromBase64({
        base64: v.base64, name: v.name, colormap: v.colormap, opacity: v.opacity,
        cal_min: v.cal_min, cal_max: v.cal_max
      });
    });
    return Promise.all(images).then(function (loaded) {
      loaded.forEach(function (img, i) {
        var v = data.volumes[i];
        if (v.colormap_label) { img.setColormapLabel(v.colormap_label); }
        if (typeof v.colormap_type === "number") { img.colormapType = v.colormap_type; }
        nv.addVolume(img);
      });
      paintRamps(box);
      nv.setSliceType(SLICE_TYPES.multiplanar);
      wire(box, nv, data);
      box.niivue = nv;  // for the browser console and the tests (which tile is where: nv.screenSlices)
      box.muData = data;
      nv.drawScene();
      return nv;
    });
  }

  function paintRamp(ramp, key) {  // a colorbar's ramp: NiiVue's 256-entry lookup table, opaque, left to right
    var lut = niivue.cmapper.colormap(key, false);
    var ctx = ramp.getContext("2d");
    var row = ctx.createImageData(256, 1);
    for (var k = 0; k < 256; k++) {
      row.data[4 * k] = lut[4 * k]; row.data[4 * k + 1] = lut[4 * k + 1]; row.data[4 * k + 2] = lut[4 * k + 2];
      row.data[4 * k + 3] = 255;
    }
    ctx.putImageData(row, 0, 0);
  }

  function paintRamps(box) {
    box.querySelectorAll("canvas.mu-cbar-ramp").forEach(function (ramp) {
      paintRamp(ramp, ramp.getAttribute("data-colormap"));
    });
  }

  // the slice a keyboard steps through in each view (a RAS voxel axis): the axial slice in the three-plane view and
  // the render, as the scroll wheel over the axial tile
  var KEY_AXIS = { 0: 2, 1: 1, 2: 0, 3: 2, 4: 2 };

  function wire(box, nv, data) {
    // keyboard: the view is focusable (tabindex 0); Page Up / Page Down step the slice of the view shown, as the
    // scroll wheel does with a mouse (NiiVue's own keys H / L and J / K move the crosshair within the slice)
    box.querySelector("canvas.mu-view").addEventListener("keydown", function (ev) {
      var step = { PageUp: 1, PageDown: -1 }[ev.key];
      if (!step) { return; }
      ev.preventDefault();  // not a page scroll
      var d = [0, 0, 0];
      d[KEY_AXIS[nv.opts.sliceType] === undefined ? 2 : KEY_AXIS[nv.opts.sliceType]] = step;
      nv.moveCrosshairInVox(d[0], d[1], d[2]);
    });
    function volumeIndex(role) {
      for (var i = 0; i < data.volumes.length; i++) { if (data.volumes[i].role === role) { return i; } }
      return -1;
    }
    box.querySelectorAll("[data-control]").forEach(function (ctl) {
      var kind = ctl.getAttribute("data-control");
      ctl.addEventListener("input", function () {
        if (kind === "view") {
          nv.setSliceType(SLICE_TYPES[ctl.value]);
        } else if (kind === "colormap") {
          var i = volumeIndex("uncertainty");
          if (i >= 0) { nv.volumes[i].colormap = ctl.value; nv.updateGLVolume(); }
          var ramp = box.querySelector('canvas.mu-cbar-ramp[data-role="uncertainty"]');
          if (ramp) { ramp.setAttribute("data-colormap", ctl.value); paintRamp(ramp, ctl.value); }
        } else if (kind === "threshold") {
          var t = volumeIndex("uncertainty");
          if (t >= 0) { nv.volumes[t].cal_min = Number(ctl.value); nv.updateGLVolume(); }
          box.querySelectorAll('[data-show="threshold"]').forEach(function (out) {
            out.textContent = fmt(Number(ctl.value));
          });
        } else if (kind === "opacity") {
          var j = volumeIndex(ctl.getAttribute("data-role"));
          if (j >= 0) { nv.setOpacity(j, Number(ctl.value) / 100); }
        }
      });
    });
  }

  function viewerOf(caseId) {
    var boxes = document.querySelectorAll("div.mu-viewer");
    for (var i = 0; i < boxes.length; i++) {
      if (boxes[i].getAttribute("data-case") === caseId) { return boxes[i]; }
    }
    return null;
  }

  function parseLesion(hash) {  // "#lesion=<case>:<x>,<y>,<z>" -> {case, mm}, or null
    var m = /^#lesion=(.*):(-?[\d.]+(?:e-?\d+)?),(-?[\d.]+(?:e-?\d+)?),(-?[\d.]+(?:e-?\d+)?)$/.exec(hash || "");
    if (!m) { return null; }
    var caseId;
    try { caseId = decodeURIComponent(m[1]); } catch (err) { return null; }
    return { caseId: caseId, mm: [Number(m[2]), Number(m[3]), Number(m[4])] };
  }

  function centre(target) {  // centre the case's viewer on a point in mm; false when the page has no such viewer
    var box = target && viewerOf(target.caseId);
    if (!box || !box.niivue) { return false; }
    var nv = box.niivue, data = box.muData;
    nv.scene.crosshairPos = nv.mm2frac(target.mm);
    nv.setSliceType(SLICE_TYPES.multiplanar);
    nv.drawScene();
    // the voxel of the (cropped, subsampled) volume in its stored order: NiiVue's own voxels (frac2vox) are those of
    // the volume reoriented to RAS, mirrored or permuted against the file for an LPS or permuted-axis case
    var mm = nv.frac2mm(nv.scene.crosshairPos), w = data.world_to_voxel;
    var vox = w ? [0, 1, 2].map(function (a) {
      return Math.round(w[a][0] * mm[0] + w[a][1] * mm[1] + w[a][2] * mm[2] + w[a][3]);
    }) : nv.frac2vox(nv.scene.crosshairPos);
    var grid = [0, 1, 2].map(function (a) { return data.crop[a][0] + data.step * vox[a]; });
    box.setAttribute("data-centre", grid.join(","));
    document.body.setAttribute("data-viewer-centre", target.caseId + ":" + grid.join(","));
    box.scrollIntoView();
    return true;
  }

  function linkLesions() {  // the rows of lesions whose case has a viewer here become links to the fragment
    document.querySelectorAll("tr[data-lesion-case][data-lesion-mm]").forEach(function (row) {
      var caseId = row.getAttribute("data-lesion-case");
      if (!viewerOf(caseId)) { return; }
      var hash = "#lesion=" + encodeURIComponent(caseId) + ":" + row.getAttribute("data-lesion-mm");
      if (!parseLesion(hash)) { return; }
      var cell = row.cells[0], a = document.createElement("a");
      a.href = hash;
      a.title = "centre the 3D viewer of this case on the lesion";
      while (cell.firstChild) { a.appendChild(cell.firstChild); }  // the case id keeps its <bdi> (review 61)
      cell.appendChild(a);
    });
  }

  function main() {
    var boxes = Array.prototype.slice.call(document.querySelectorAll("div.mu-viewer"));
    if (typeof niivue === "undefined") {
      boxes.forEach(function (b) { showError(b, new Error("niivue.umd.js did not load")); });
      return;
    }
    var ready = 0;
    document.body.setAttribute("data-viewer-count", String(boxes.length));
    boxes.forEach(function (box) {
      try {
        start(box).then(function () {
          dropPending(box);
          ready += 1;
          if (ready === 1) {  // where the first canvas is on the page, for a screenshot test to crop it
            var r = box.querySelector("canvas.mu-view").getBoundingClientRect();
            document.body.setAttribute("data-viewer-rect", [r.left + window.scrollX, r.top + window.scrollY,
              r.width, r.height].map(Math.round).join(","));
          }
          document.body.setAttribute("data-viewer-ready", String(ready));
          if (ready === boxes.length) {
            linkLesions();
            centre(parseLesion(window.location.hash));
            window.addEventListener("hashchange", function () { centre(parseLesion(window.location.hash)); });
          }
        }, function (err) { showError(box, err); });
      } catch (err) {
        showError(box, err);
      }
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", main);
  } else {
    main();
  }
})();
