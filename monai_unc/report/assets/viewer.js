// monai-unc: the interactive viewer of the report and triage pages (monai_unc/report/viewer.py writes its data).
// Every <div class="mu-viewer"> holds a canvas, its controls and the id of a <script type="application/json">
// block with the case's volumes (gzipped NIfTI as base64: image, prediction, uncertainty). NiiVue (the global
// `niivue` of niivue.umd.js, loaded before this file) draws them; nothing is fetched from the network. When every
// viewer has loaded, <body data-viewer-ready="N"> says so (and data-viewer-rect where the first canvas is); a
// viewer that fails shows its error and sets data-viewer-error on the body (tests read these).
(function () {
  "use strict";
  var SLICE_TYPES = { multiplanar: 3, axial: 0, coronal: 1, sagittal: 2, render: 4 };

  function byId(id) { return document.getElementById(id); }

  function showError(box, err) {
    var msg = document.createElement("p");
    msg.className = "mu-viewer-error";
    msg.textContent = "The interactive viewer could not start (" + (err && err.message ? err.message : err) +
      "); the slices above show the same case.";
    box.appendChild(msg);
    document.body.setAttribute("data-viewer-error", String(err && err.message ? err.message : err));
  }

  function start(box) {
    var data = JSON.parse(byId(box.getAttribute("data-volumes")).textContent);
    var canvas = box.querySelector("canvas");
    var nv = new niivue.Niivue({
      backColor: [0, 0, 0, 1], show3Dcrosshair: true, multiplanarShowRender: 2, isColorbar: true,
      loadingText: "loading " + data.case
    });
    nv.attachToCanvas(canvas);
    var images = data.volumes.map(function (v) {
      return niivue.NVImage.loadFromBase64({
        base64: v.base64, name: v.name, colormap: v.colormap, opacity: v.opacity,
        cal_min: v.cal_min, cal_max: v.cal_max
      });
    });
    return Promise.all(images).then(function (loaded) {
      loaded.forEach(function (img) { nv.addVolume(img); });
      nv.setSliceType(SLICE_TYPES.multiplanar);
      wire(box, nv, data);
      nv.drawScene();
      return nv;
    });
  }

  function wire(box, nv, data) {
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
        } else if (kind === "opacity") {
          var j = volumeIndex(ctl.getAttribute("data-role"));
          if (j >= 0) { nv.setOpacity(j, Number(ctl.value) / 100); }
        }
      });
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
          ready += 1;
          if (ready === 1) {  // where the first canvas is on the page, for a screenshot test to crop it
            var r = box.querySelector("canvas").getBoundingClientRect();
            document.body.setAttribute("data-viewer-rect", [r.left + window.scrollX, r.top + window.scrollY,
              r.width, r.height].map(Math.round).join(","));
          }
          document.body.setAttribute("data-viewer-ready", String(ready));
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
