// The camera: a live preview and a button that takes one frame as the photo (at the site's size, like an upload)
function vitvizCamera(button, video, onFrame, say) {
  let stream = null;
  button.addEventListener("click", async () => {
    if (!stream) {
      try {
        stream = await navigator.mediaDevices.getUserMedia({ video: { facingMode: "environment" }, audio: false });
      } catch (e) {
        say(`The camera could not be opened: ${e.message}.`);
        return;
      }
      video.srcObject = stream;
      video.hidden = false;
      await video.play();
      button.textContent = "Take this frame";
      return;
    }
    if (!video.videoWidth) {
      say("The camera has no picture yet: try again in a moment.");
      return;
    }
    const canvas = document.createElement("canvas");
    canvas.width = video.videoWidth;
    canvas.height = video.videoHeight;
    canvas.getContext("2d").drawImage(video, 0, 0);
    for (const track of stream.getTracks()) track.stop(); // the camera's light goes off with its one frame
    stream = null;
    video.srcObject = null;
    video.hidden = true;
    button.textContent = "Camera";
    canvas.toBlob((blob) => onFrame(blob), "image/png");
  });
}
